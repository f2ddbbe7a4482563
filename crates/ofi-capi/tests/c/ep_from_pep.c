/* ep_from_pep: an active MSG endpoint acquires a passive endpoint's address
 * (fi_endpoint(3): info->handle names the passive endpoint), as a client
 * that reserves its source address before it knows whether it will
 * connect or listen does. fi_getinfo copies a passive endpoint in
 * hints->handle to info->handle (fi_getinfo(3)); the endpoint opened with
 * that info reports the passive endpoint's address from fi_getname, before
 * and after it connects; the accepting side reports its listener's.
 *
 * Both sides run in this process, on tcp over 127.0.0.1. */
#include "common.h"
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

/* A port nothing uses now (the kernel's pick for a socket closed again). */
static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof a;
	int s = socket(AF_INET, SOCK_STREAM, 0), port = 0;
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	if (s >= 0 && !bind(s, (struct sockaddr *)&a, sizeof a) &&
	    !getsockname(s, (struct sockaddr *)&a, &len))
		port = ntohs(a.sin_port);
	if (s >= 0)
		close(s);
	return port;
}

static int same_addr(struct fid *f, const struct sockaddr_in *want)
{
	struct sockaddr_in got = { 0 };
	size_t len = sizeof got;
	int r = fi_getname(f, &got, &len);
	if (r || got.sin_port != want->sin_port || got.sin_addr.s_addr != want->sin_addr.s_addr) {
		printf("  getname %d: %s:%d, expected port %d\n", r, inet_ntoa(got.sin_addr),
		       ntohs(got.sin_port), ntohs(want->sin_port));
		return 0;
	}
	return 1;
}

/* A passive endpoint opened without an address, then named
 * 127.0.0.1:port with fi_setname. */
static int named_pep(struct fid_fabric *fab, struct fi_info *info, int port,
		     struct fid_pep **pep, struct sockaddr_in *bound)
{
	void *saved = info->src_addr;
	size_t saved_len = info->src_addrlen;
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
	size_t len = sizeof *bound;
	int r;
	inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
	info->src_addr = NULL;
	info->src_addrlen = 0;
	r = fi_passive_ep(fab, info, pep, NULL);
	info->src_addr = saved;
	info->src_addrlen = saved_len;
	if (r)
		return r;
	if ((r = fi_setname(&(*pep)->fid, &sin, sizeof sin)))
		return r;
	memset(bound, 0, sizeof *bound);
	return fi_getname(&(*pep)->fid, bound, &len);
}

/* Reads one event of `eq` within 10 s, driving `other` meanwhile. */
static ssize_t next_event(struct fid_eq *eq, struct fid_eq *other, uint32_t *event,
			  struct fi_eq_cm_entry *e)
{
	double end = now_s() + 10;
	ssize_t r;
	uint32_t ev;
	struct fi_eq_cm_entry scratch;
	do {
		r = fi_eq_read(eq, event, e, sizeof *e, 0);
		if (r != -FI_EAGAIN)
			return r;
		if (other && fi_eq_read(other, &ev, &scratch, sizeof scratch, FI_PEEK) > 0 &&
		    ev != FI_CONNREQ && ev != FI_CONNECTED)
			fi_eq_read(other, &ev, &scratch, sizeof scratch, 0);
	} while (now_s() < end);
	return -FI_ETIMEDOUT;
}

int main(void)
{
	start();
	struct fi_info *hints = fi_allocinfo(), *fi_pep = NULL, *fi = NULL;
	hints->fabric_attr->prov_name = strdup("tcp");
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->addr_format = FI_SOCKADDR_IN;
	int r = fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, hints, &fi_pep);
	CHECK("getinfo for the passive endpoints", r == 0);
	if (r)
		return finish();
	struct fid_fabric *fab;
	struct fid_eq *seq, *ceq;
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
	CHECK("fabric", fi_fabric(fi_pep->fabric_attr, &fab, NULL) == 0);
	CHECK("eqs", fi_eq_open(fab, &ea, &seq, NULL) == 0 && fi_eq_open(fab, &ea, &ceq, NULL) == 0);

	/* The server: a passive endpoint named with setname, listening. */
	struct fid_pep *spep, *cpep;
	struct sockaddr_in sbound, cbound;
	int sport = free_port(), cport = free_port();
	CHECK("free ports", sport > 0 && cport > 0 && sport != cport);
	r = named_pep(fab, fi_pep, sport, &spep, &sbound);
	CHECK("server passive endpoint", r == 0 && ntohs(sbound.sin_port) == sport);
	CHECK("server listens", fi_pep_bind(spep, &seq->fid, 0) == 0 && fi_listen(spep) == 0);

	/* The client: a passive endpoint reserves its address. */
	r = named_pep(fab, fi_pep, cport, &cpep, &cbound);
	CHECK("client passive endpoint", r == 0 && ntohs(cbound.sin_port) == cport);
	hints->handle = &cpep->fid;
	char service[16];
	snprintf(service, sizeof service, "%d", sport);
	r = fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", service, 0, hints, &fi);
	hints->handle = NULL;
	SAME("getinfo with a passive endpoint as hints->handle %d", r);
	if (r)
		return finish();
	SAME("info->handle is that passive endpoint %d", fi->handle == &cpep->fid);
	struct fid_domain *cdom, *sdom;
	struct fid_ep *cep, *sep = NULL;
	struct fid_cq *ccq, *scq;
	struct fi_cq_attr qa = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE };
	CHECK("client domain", fi_domain(fab, fi, &cdom, NULL) == 0);
	CHECK("client cq", fi_cq_open(cdom, &qa, &ccq, NULL) == 0);
	SAME("fi_endpoint with the passive endpoint's info %d", fi_endpoint(cdom, fi, &cep, NULL));
	SAME("closing the passive endpoint %d", fi_close(&cpep->fid));
	CHECK("client endpoint bound", fi_ep_bind(cep, &ceq->fid, 0) == 0 &&
					       fi_ep_bind(cep, &ccq->fid, FI_TRANSMIT | FI_RECV) == 0 &&
					       fi_enable(cep) == 0);
	CHECK("after fi_endpoint the endpoint has the passive endpoint's address",
	      same_addr(&cep->fid, &cbound));

	SAME("connect %d", fi_connect(cep, fi->dest_addr, NULL, 0));
	uint32_t event = 0;
	struct fi_eq_cm_entry e;
	ssize_t n = next_event(seq, ceq, &event, &e);
	CHECK("the server gets a connection request", n == sizeof e && event == FI_CONNREQ);
	static char in[64], out[64] = "from the reserved address";
	if (n == sizeof e && event == FI_CONNREQ) {
		CHECK("server domain", fi_domain(fab, e.info, &sdom, NULL) == 0);
		CHECK("server cq", fi_cq_open(sdom, &qa, &scq, NULL) == 0);
		CHECK("server endpoint", fi_endpoint(sdom, e.info, &sep, NULL) == 0 &&
						 fi_ep_bind(sep, &seq->fid, 0) == 0 &&
						 fi_ep_bind(sep, &scq->fid, FI_TRANSMIT | FI_RECV) == 0 &&
						 fi_enable(sep) == 0);
		CHECK("server receive", fi_recv(sep, in, sizeof in, NULL, 0, NULL) == 0);
		CHECK("accept", fi_accept(sep, NULL, 0) == 0);
		fi_freeinfo(e.info);
		n = next_event(ceq, seq, &event, &e);
		CHECK("the client is connected", n == sizeof e && event == FI_CONNECTED);
		n = next_event(seq, NULL, &event, &e);
		CHECK("the server is connected", n == sizeof e && event == FI_CONNECTED);
		CHECK("after connect the client's address is the passive endpoint's",
		      same_addr(&cep->fid, &cbound));
		CHECK("after accept the server's address is its listener's",
		      same_addr(&sep->fid, &sbound));
		struct sockaddr_in peer = { 0 };
		size_t plen = sizeof peer;
		CHECK("the server sees the client at the reserved address",
		      fi_getpeer(sep, &peer, &plen) == 0 && peer.sin_port == cbound.sin_port);
		CHECK("send", fi_send(cep, out, sizeof out, NULL, 0, NULL) == 0);
		struct fi_cq_entry done;
		int got = 0;
		for (double end = now_s() + 10; got < 2 && now_s() < end;) {
			if (fi_cq_read(scq, &done, 1) == 1)
				got++;
			if (fi_cq_read(ccq, &done, 1) == 1)
				got++;
		}
		CHECK("the message arrives", got == 2 && !strcmp(in, out));
		fi_shutdown(cep, 0);
		fi_close(&sep->fid);
		fi_close(&scq->fid);
		fi_close(&sdom->fid);
	}
	fi_close(&cep->fid);
	fi_close(&ccq->fid);
	fi_close(&cdom->fid);
	fi_close(&spep->fid);
	fi_close(&seq->fid);
	fi_close(&ceq->fid);
	fi_close(&fab->fid);
	fi_freeinfo(fi);
	fi_freeinfo(fi_pep);
	fi_freeinfo(hints);
	return finish();
}
