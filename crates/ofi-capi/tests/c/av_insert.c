/* fi_av_insert with malformed raw addresses: junk bytes, strings that are
 * not addresses, and several addresses in one call, on a shm AV
 * (FI_ADDR_STR: NUL-terminated strings packed back to back) and a tcp AV
 * (FI_SOCKADDR_IN). Nothing may crash; every malformed address is refused
 * with FI_ADDR_NOTAVAIL and counted out of the return value, and valid
 * addresses still insert and resolve. Prints "ok <what>" per passed check
 * and "FAIL <what>" otherwise; "ALL OK" at the end when all passed. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

static int failures;
#define CHECK(what, cond) do { \
	if (cond) printf("ok %s\n", what); \
	else { printf("FAIL %s (line %d)\n", what, __LINE__); failures++; } \
} while (0)

struct setup {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	char name[256];
	size_t namelen;
};

static int open_prov(const char *prov, struct setup *s)
{
	struct fi_info *hints = fi_allocinfo();
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG;
	int r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &s->info);
	fi_freeinfo(hints);
	if (r) return r;
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_CONTEXT };
	if ((r = fi_fabric(s->info->fabric_attr, &s->fabric, NULL)) ||
	    (r = fi_domain(s->fabric, s->info, &s->domain, NULL)) ||
	    (r = fi_av_open(s->domain, &aa, &s->av, NULL)) ||
	    (r = fi_cq_open(s->domain, &ca, &s->cq, NULL)) ||
	    (r = fi_endpoint(s->domain, s->info, &s->ep, NULL)) ||
	    (r = fi_ep_bind(s->ep, &s->av->fid, 0)) ||
	    (r = fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (r = fi_enable(s->ep)))
		return r;
	s->namelen = sizeof s->name;
	return fi_getname(&s->ep->fid, s->name, &s->namelen);
}

static void close_all(struct setup *s)
{
	fi_close(&s->ep->fid);
	fi_close(&s->cq->fid);
	fi_close(&s->av->fid);
	fi_close(&s->domain->fid);
	fi_close(&s->fabric->fid);
	fi_freeinfo(s->info);
}

/* The shm AV: FI_ADDR_STR. */
static void shm_checks(void)
{
	struct setup s;
	memset(&s, 0, sizeof s);
	int r = open_prov("shm", &s);
	CHECK("shm opens", r == 0);
	if (r) return;
	CHECK("shm uses FI_ADDR_STR", s.info->addr_format == FI_ADDR_STR);
	fi_addr_t a[8];
	char junk[512];
	memset(junk, 0xA5, sizeof junk);

	for (int i = 0; i < 8; i++) a[i] = 7;
	r = fi_av_insert(s.av, junk, 1, a, 0, NULL);
	CHECK("512 bytes of 0xA5: 0 inserted", r == 0);
	CHECK("512 bytes of 0xA5: FI_ADDR_NOTAVAIL", a[0] == FI_ADDR_NOTAVAIL);

	a[0] = 7;
	r = fi_av_insert(s.av, "12345", 1, a, 0, NULL);
	CHECK("\"12345\": 0 inserted", r == 0 && a[0] == FI_ADDR_NOTAVAIL);
	a[0] = 7;
	r = fi_av_insert(s.av, "hello", 1, a, 0, NULL);
	CHECK("\"hello\": 0 inserted", r == 0 && a[0] == FI_ADDR_NOTAVAIL);
	a[0] = a[1] = 7;
	r = fi_av_insert(s.av, "hello\0world", 2, a, 0, NULL);
	CHECK("two non-addresses: 0 inserted, both FI_ADDR_NOTAVAIL",
	      r == 0 && a[0] == FI_ADDR_NOTAVAIL && a[1] == FI_ADDR_NOTAVAIL);

	/* Junk with no fi_addr array and a count far beyond the buffer: the
	 * first address is malformed, so nothing past it is read or sized. */
	r = fi_av_insert(s.av, junk, INT_MAX, NULL, 0, NULL);
	CHECK("junk, count INT_MAX, no fi_addr: 0 inserted", r == 0);

	/* An array of char * (not this format): refused, not dereferenced. */
	char *ptrs[2] = { s.name, s.name };
	for (int i = 0; i < 2; i++) a[i] = 7;
	r = fi_av_insert(s.av, ptrs, 2, a, 0, NULL);
	CHECK("char * array: 0 inserted",
	      r == 0 && a[0] == FI_ADDR_NOTAVAIL && a[1] == FI_ADDR_NOTAVAIL);

	/* Valid, malformed, valid: the good ones insert. */
	char buf[1024];
	size_t n = strlen(s.name) + 1, at = 0;
	memcpy(buf + at, s.name, n); at += n;
	memcpy(buf + at, "bad", 4); at += 4;
	memcpy(buf + at, s.name, n); at += n;
	for (int i = 0; i < 3; i++) a[i] = 7;
	int st[3] = { -1, -1, -1 };
	r = fi_av_insert(s.av, buf, 3, a, FI_SYNC_ERR, st);
	CHECK("valid, \"bad\", valid: 2 inserted", r == 2);
	CHECK("valid, \"bad\", valid: only the middle one FI_ADDR_NOTAVAIL",
	      a[0] != FI_ADDR_NOTAVAIL && a[1] == FI_ADDR_NOTAVAIL && a[2] != FI_ADDR_NOTAVAIL);
	CHECK("FI_SYNC_ERR statuses 0, FI_EINVAL, 0", st[0] == 0 && st[1] == FI_EINVAL && st[2] == 0);

	/* Valid then unterminated junk, count beyond the buffer. */
	memcpy(buf, s.name, n);
	memset(buf + n, 0xA5, sizeof buf - n);
	for (int i = 0; i < 5; i++) a[i] = 7;
	r = fi_av_insert(s.av, buf, 5, a, 0, NULL);
	CHECK("valid then junk, count 5: 1 inserted", r == 1 && a[0] != FI_ADDR_NOTAVAIL);
	CHECK("valid then junk, count 5: the rest FI_ADDR_NOTAVAIL",
	      a[1] == FI_ADDR_NOTAVAIL && a[2] == FI_ADDR_NOTAVAIL &&
	      a[3] == FI_ADDR_NOTAVAIL && a[4] == FI_ADDR_NOTAVAIL);

	/* A valid insert resolves back to the same name, and works. */
	r = fi_av_insert(s.av, s.name, 1, a, 0, NULL);
	CHECK("own name: 1 inserted", r == 1 && a[0] != FI_ADDR_NOTAVAIL);
	char back[256];
	size_t blen = sizeof back;
	r = fi_av_lookup(s.av, a[0], back, &blen);
	CHECK("lookup gives the name back", r == 0 && blen == s.namelen && !memcmp(back, s.name, blen));
	char msg[] = "through a checked address", got[64] = { 0 };
	r = (int)fi_recv(s.ep, got, sizeof got, NULL, FI_ADDR_UNSPEC, NULL);
	CHECK("recv posted", r == 0);
	r = (int)fi_send(s.ep, msg, sizeof msg, NULL, a[0], NULL);
	CHECK("send to the inserted address", r == 0);
	struct fi_cq_entry e[2];
	int done = 0;
	for (int spins = 0; done < 2 && spins < 5000000; spins++) {
		ssize_t k = fi_cq_read(s.cq, e, 2);
		if (k > 0) done += (int)k;
	}
	CHECK("both completions", done == 2);
	CHECK("the message arrived", !strcmp(got, msg));

	char text[64];
	size_t tlen = sizeof text;
	fi_av_straddr(s.av, junk, text, &tlen);
	CHECK("straddr of junk returns", 1);
	close_all(&s);
}

/* The tcp AV: FI_SOCKADDR_IN, fixed-size addresses. */
static void tcp_checks(void)
{
	struct setup s;
	memset(&s, 0, sizeof s);
	int r = open_prov("tcp", &s);
	CHECK("tcp opens", r == 0);
	if (r) return;
	fi_addr_t a[4] = { 7, 7, 7, 7 };
	char junk[512];
	memset(junk, 0xA5, sizeof junk);
	r = fi_av_insert(s.av, junk, 1, a, 0, NULL);
	CHECK("tcp: 512 bytes of 0xA5: 0 inserted", r == 0 && a[0] == FI_ADDR_NOTAVAIL);
	r = fi_av_insert(s.av, junk, 4, a, 0, NULL);
	CHECK("tcp: four junk addresses: 0 inserted",
	      r == 0 && a[0] == FI_ADDR_NOTAVAIL && a[3] == FI_ADDR_NOTAVAIL);
	r = fi_av_insert(s.av, s.name, 1, a, 0, NULL);
	CHECK("tcp: own name: 1 inserted", r == 1 && a[0] != FI_ADDR_NOTAVAIL);
	close_all(&s);
}

int main(void)
{
	/* Line-buffered, so a crash still shows the checks before it. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	shm_checks();
	tcp_checks();
	if (failures) {
		printf("%d FAILED\n", failures);
		return 1;
	}
	printf("ALL OK\n");
	return 0;
}
