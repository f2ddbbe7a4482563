/* Items 5 and 6 of issue 16: the generic FI_SOCKADDR address format gets
 * tcp offers (each in its specific format), and a node that does not
 * resolve makes fi_getinfo return -FI_ENODATA at once. */
#include "common.h"
#include <arpa/inet.h>
#include <netinet/in.h>

/* fi_getinfo with the hints of the client: FI_SOCKADDR, every mode
 * bit, every mr_mode bit but the old two, RDM or MSG. */
static int sockaddr_getinfo(const char *node, uint64_t flags, enum fi_ep_type type, struct fi_info **out)
{
	struct fi_info *hints = fi_allocinfo();
	hints->fabric_attr->prov_name = strdup("tcp");
	hints->addr_format = FI_SOCKADDR;
	hints->mode = ~0ULL;
	hints->domain_attr->mode = ~0ULL;
	hints->domain_attr->mr_mode = ~(FI_MR_BASIC | FI_MR_SCALABLE);
	hints->ep_attr->type = type;
	int r = fi_getinfo(FI_VERSION(1, 17), node, NULL, flags, hints, out);
	fi_freeinfo(hints);
	return r;
}

/* Every offer is tcp's in FI_SOCKADDR_IN (or _IN6 with `v6`), its source
 * address of that family and length. */
static int specific(struct fi_info *list, int v6, const char *src_ip)
{
	int n = 0;
	for (struct fi_info *i = list; i; i = i->next, n++) {
		uint32_t want = v6 ? FI_SOCKADDR_IN6 : FI_SOCKADDR_IN;
		size_t len = v6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
		if (i->addr_format != want || i->src_addrlen != len || !i->src_addr)
			return 0;
		if (src_ip && !v6) {
			char b[INET_ADDRSTRLEN];
			inet_ntop(AF_INET, &((struct sockaddr_in *)i->src_addr)->sin_addr, b, sizeof b);
			if (strcmp(b, src_ip))
				return 0;
		}
	}
	return n;
}

static int offers_of(int r, struct fi_info *l)
{
	int n = 0;
	for (; !r && l; l = l->next)
		n++;
	return n;
}

int main(void)
{
	struct fi_info *info = NULL;
	int r;

	start();
	/* Item 5. */
	for (enum fi_ep_type t = FI_EP_MSG; t <= FI_EP_RDM; t += FI_EP_RDM - FI_EP_MSG) {
		r = sockaddr_getinfo("127.0.0.1", FI_SOURCE, t, &info);
		SAME("FI_SOCKADDR, source 127.0.0.1, type %d: %d", t, r);
		CHECK("offers in FI_SOCKADDR_IN from 127.0.0.1", r == 0 && specific(info, 0, "127.0.0.1") > 0);
		if (!r)
			fi_freeinfo(info);
		r = sockaddr_getinfo("127.0.0.1", 0, t, &info);
		SAME("FI_SOCKADDR, destination 127.0.0.1, type %d: %d", t, r);
		CHECK("with a destination of that format",
		      r == 0 && specific(info, 0, NULL) > 0 && info->dest_addrlen == sizeof(struct sockaddr_in));
		if (!r)
			fi_freeinfo(info);
	}
	r = sockaddr_getinfo("::1", FI_SOURCE, FI_EP_RDM, &info);
	SAME("FI_SOCKADDR, source ::1: %d", r);
	CHECK("offers in FI_SOCKADDR_IN6", r == 0 && specific(info, 1, NULL) > 0);
	if (!r)
		fi_freeinfo(info);
	r = sockaddr_getinfo(NULL, 0, FI_EP_RDM, &info);
	SAME("FI_SOCKADDR without a node: %d", r);
	int v4 = 0, v6 = 0;
	for (struct fi_info *i = r ? NULL : info; i; i = i->next) {
		v4 += i->addr_format == FI_SOCKADDR_IN;
		v6 += i->addr_format == FI_SOCKADDR_IN6;
	}
	CHECK("offers of both families, each in its format", v4 > 0 && v4 + v6 == offers_of(r, info));
	if (!r)
		fi_freeinfo(info);

	/* Negative: formats no provider has. */
	struct fi_info *hints = fi_allocinfo();
	hints->fabric_attr->prov_name = strdup("tcp");
	hints->addr_format = FI_ADDR_PSMX2;
	SAME("tcp with FI_ADDR_PSMX2: %d", fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	hints->addr_format = 999;
	SAME("tcp with address format 999: %d", fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	/* A source address too short for its format. */
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	hints->addr_format = FI_SOCKADDR_IN;
	hints->src_addr = malloc(sizeof sin);
	memcpy(hints->src_addr, &sin, sizeof sin);
	hints->src_addrlen = 3;
	r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
	/* libfabric 1.17 takes it (and reads past it). */
	CHECK_OFI("a 3-byte FI_SOCKADDR_IN source address is -FI_EINVAL", r == -FI_EINVAL);
	fi_freeinfo(hints);

	/* Item 6: a node that does not resolve. */
	const char *provs[] = { "tcp", "shm", NULL };
	for (int p = 0; p < 3; p++) {
		for (int src = 0; src < 2; src++) {
			hints = fi_allocinfo();
			if (provs[p])
				hints->fabric_attr->prov_name = strdup(provs[p]);
			hints->ep_attr->type = FI_EP_RDM;
			r = fi_getinfo(FI_VERSION(1, 17), "g00n13s", NULL, src ? FI_SOURCE : 0, hints, &info);
			char what[96];
			snprintf(what, sizeof what, "unresolvable %s node g00n13s, provider %s",
				 src ? "source" : "destination", provs[p] ? provs[p] : "any");
			/* libfabric 1.17's shm takes the node as a shm name and
			 * succeeds (so does a request naming no provider). */
			if (provs[p] && !strcmp(provs[p], "tcp")) {
				SAME("%s: %d", what, r);
			} else {
				char check[128];
				snprintf(check, sizeof check, "%s is -FI_ENODATA", what);
				CHECK_OFI(check, r == -FI_ENODATA);
			}
			if (!r)
				fi_freeinfo(info);
			fi_freeinfo(hints);
		}
	}
	/* A name that resolves still works. */
	r = fi_getinfo(FI_VERSION(1, 17), "localhost", NULL, 0, NULL, &info);
	SAME("node localhost: %d", r);
	if (!r)
		fi_freeinfo(info);
	return finish();
}
