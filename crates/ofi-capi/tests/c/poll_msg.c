/* poll_msg: poll_rdm's flow over connected MSG endpoints (a fabtests
 * client run with -e msg): two processes on 127.0.0.1, each with a
 * transmit and a receive CQ (and counters in "counter" mode) in a poll set.
 * Each side posts its receive before the connection is up, the server
 * accepts, then each sends its greeting and waits with fi_poll until its
 * send and receive are complete, reading one completion from each CQ that
 * fi_poll names. The receive buffer must then hold the peer's greeting,
 * string and length, as a client that compares them checks.
 *
 * Usage: poll_msg PROVIDER [queue|counter] [ROUNDS] [SIZE]
 * SIZE 0 sends the greeting's bytes alone (strlen + 1); otherwise SIZE
 * bytes, the greeting at their start (1 MiB takes the rendezvous path).
 * The server's listener takes a port of the kernel's choice and tells the
 * client its name through a pipe. */
#include "common.h"
#include <sys/wait.h>
#include <unistd.h>

#define MAX_POLL 10

struct side {
	int server, counters;
	size_t size, xfer;
	struct fi_info *info, *pinfo;
	struct fid_fabric *fab;
	struct fid_eq *eq;
	struct fid_pep *pep;
	struct fid_domain *dom;
	struct fid_cq *txcq, *rxcq;
	struct fid_cntr *txcntr, *rxcntr;
	struct fid_ep *ep;
	struct fid_poll *ps;
	struct fid_mr *mr;
	void *desc;
	char *buf, *rx_buf, *tx_buf;
	uint64_t tx_seq, rx_seq, tx_done, rx_done;
	struct fi_context tx_ctx, rx_ctx;
};

static const char *greeting(int server)
{
	return server ? "Hello from Server!" : "Hello from Client!";
}

static struct fi_info *hints_for(const char *prov)
{
	struct fi_info *h = fi_allocinfo();
	h->fabric_attr->prov_name = strdup(prov);
	h->ep_attr->type = FI_EP_MSG;
	h->caps = FI_MSG;
	h->mode = FI_CONTEXT;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	return h;
}

/* CQs, counters, endpoint, poll set, buffer, and the first receive. */
static int open_active(struct side *s)
{
	int r;
	struct fi_cq_attr qa = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE,
				 .size = s->info->tx_attr->size };
	if ((r = fi_cq_open(s->dom, &qa, &s->txcq, &s->txcq)))
		return r;
	qa.size = s->info->rx_attr->size;
	if ((r = fi_cq_open(s->dom, &qa, &s->rxcq, &s->rxcq)))
		return r;
	if (s->counters) {
		struct fi_cntr_attr ca = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE };
		if ((r = fi_cntr_open(s->dom, &ca, &s->txcntr, &s->txcntr)) ||
		    (r = fi_cntr_open(s->dom, &ca, &s->rxcntr, &s->rxcntr)))
			return r;
	}
	if ((r = fi_endpoint(s->dom, s->info, &s->ep, NULL)) ||
	    (r = fi_ep_bind(s->ep, &s->eq->fid, 0)))
		return r;
	/* With counters the CQs take selected completions only (none here),
	 * as fabtests binds them. */
	uint64_t sel = s->counters ? FI_SELECTIVE_COMPLETION : 0;
	if ((r = fi_ep_bind(s->ep, &s->txcq->fid, FI_TRANSMIT | sel)) ||
	    (r = fi_ep_bind(s->ep, &s->rxcq->fid, FI_RECV | sel)))
		return r;
	if (s->counters && ((r = fi_ep_bind(s->ep, &s->txcntr->fid, FI_SEND)) ||
			    (r = fi_ep_bind(s->ep, &s->rxcntr->fid, FI_RECV))))
		return r;
	struct fi_poll_attr pa = { 0 };
	if ((r = fi_poll_open(s->dom, &pa, &s->ps)) ||
	    (r = fi_poll_add(s->ps, &s->txcq->fid, 0)) ||
	    (r = fi_poll_add(s->ps, &s->rxcq->fid, 0)))
		return r;
	if (s->counters && ((r = fi_poll_add(s->ps, &s->txcntr->fid, 0)) ||
			    (r = fi_poll_add(s->ps, &s->rxcntr->fid, 0))))
		return r;
	if ((r = fi_enable(s->ep)))
		return r;
	s->buf = calloc(1, 2 * s->xfer);
	if (!s->buf)
		return -FI_ENOMEM;
	s->rx_buf = s->buf;
	s->tx_buf = s->buf + s->xfer;
	if ((r = fi_mr_reg(s->dom, s->buf, 2 * s->xfer, FI_SEND | FI_RECV, 0, 0, 0, &s->mr, NULL)))
		return r;
	s->desc = fi_mr_desc(s->mr);
	if ((r = (int)fi_recv(s->ep, s->rx_buf, s->xfer, s->desc, 0, &s->rx_ctx)))
		return r;
	s->rx_seq++;
	return 0;
}

/* The next CM event, which must be `want`, within 10 s. */
static int cm_event(struct side *s, uint32_t want, struct fi_eq_cm_entry *e)
{
	uint32_t ev;
	ssize_t r = fi_eq_sread(s->eq, &ev, e, sizeof *e, 10000, 0);
	if (r != sizeof *e) {
		printf("%s: fi_eq_sread %zd waiting for event %u\n", s->server ? "server" : "client", r,
		       want);
		return -1;
	}
	if (ev != want) {
		printf("%s: event %u, not %u\n", s->server ? "server" : "client", ev, want);
		return -1;
	}
	return 0;
}

/* Connects the two sides: the server listens on 127.0.0.1 at a port of
 * the kernel's choice and writes its name to `to_peer`; the client reads
 * it from `from_peer` and connects to it. */
static int connect_sides(struct side *s, const char *prov, int to_peer, int from_peer)
{
	struct fi_info *h = hints_for(prov);
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
	struct fi_eq_cm_entry e;
	int r;
	if (s->server) {
		r = fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, h, &s->pinfo);
		fi_freeinfo(h);
		if (r)
			return r;
		if ((r = fi_fabric(s->pinfo->fabric_attr, &s->fab, NULL)) ||
		    (r = fi_eq_open(s->fab, &ea, &s->eq, NULL)) ||
		    (r = fi_passive_ep(s->fab, s->pinfo, &s->pep, NULL)) ||
		    (r = fi_pep_bind(s->pep, &s->eq->fid, 0)) || (r = fi_listen(s->pep)))
			return r;
		char name[128];
		size_t len = sizeof name;
		if ((r = fi_getname(&s->pep->fid, name, &len)))
			return r;
		if (write(to_peer, &len, sizeof len) != sizeof len ||
		    write(to_peer, name, len) != (ssize_t)len)
			return -FI_EIO;
		if (cm_event(s, FI_CONNREQ, &e))
			return -FI_EOTHER;
		s->info = e.info;
		if ((r = fi_domain(s->fab, s->info, &s->dom, NULL)) || (r = open_active(s)) ||
		    (r = fi_accept(s->ep, NULL, 0)))
			return r;
		return cm_event(s, FI_CONNECTED, &e) ? -FI_EOTHER : 0;
	}
	char name[128];
	size_t len;
	if (read(from_peer, &len, sizeof len) != sizeof len || len > sizeof name ||
	    read(from_peer, name, len) != (ssize_t)len) {
		fi_freeinfo(h);
		return -FI_EIO;
	}
	h->addr_format = FI_SOCKADDR_IN;
	h->dest_addr = malloc(len);
	memcpy(h->dest_addr, name, len);
	h->dest_addrlen = len;
	r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &s->info);
	fi_freeinfo(h);
	if (r)
		return r;
	if ((r = fi_fabric(s->info->fabric_attr, &s->fab, NULL)) ||
	    (r = fi_eq_open(s->fab, &ea, &s->eq, NULL)) ||
	    (r = fi_domain(s->fab, s->info, &s->dom, NULL)) || (r = open_active(s)) ||
	    (r = fi_connect(s->ep, s->info->dest_addr, NULL, 0)))
		return r;
	return cm_event(s, FI_CONNECTED, &e) ? -FI_EOTHER : 0;
}

/* Sends the greeting and waits on the poll set until the send and the
 * receive are complete, reading one completion per CQ named; 0 or an
 * error. */
static int send_recv(struct side *s)
{
	const char *g = greeting(s->server);
	snprintf(s->tx_buf, s->xfer, "%s", g);
	size_t len = s->size ? s->size : strlen(g) + 1;
	double end = now_s() + 10;
	ssize_t r;
	while ((r = fi_send(s->ep, s->tx_buf, len, s->desc, 0, &s->tx_ctx)) == -FI_EAGAIN &&
	       now_s() < end)
		fi_poll(s->ps, NULL, 0);
	if (r)
		return (int)r;
	s->tx_seq++;
	uint64_t txc = 0, rxc = 0;
	while (s->counters ? (txc < s->tx_seq || rxc < s->rx_seq)
			   : (s->tx_done < s->tx_seq || s->rx_done < s->rx_seq)) {
		void *ctx[MAX_POLL];
		int n;
		do {
			n = fi_poll(s->ps, ctx, MAX_POLL);
			if (n < 0)
				return n;
		} while (!n && now_s() < end);
		if (!n)
			return -FI_ETIMEDOUT;
		for (int i = 0; i < n; i++) {
			struct fid_cq *cq;
			if (ctx[i] == &s->txcq) {
				cq = s->txcq;
				s->tx_done++;
			} else if (ctx[i] == &s->rxcq) {
				cq = s->rxcq;
				s->rx_done++;
			} else if (ctx[i] == &s->txcntr) {
				txc = fi_cntr_read(s->txcntr);
				continue;
			} else if (ctx[i] == &s->rxcntr) {
				rxc = fi_cntr_read(s->rxcntr);
				continue;
			} else {
				printf("fi_poll gave a context of no member: %p\n", ctx[i]);
				return -FI_EOTHER;
			}
			struct fi_cq_entry e;
			ssize_t got = fi_cq_read(cq, &e, 1);
			if (got < 0) {
				printf("%s: fi_cq_read %zd on a CQ fi_poll named\n",
				       s->server ? "server" : "client", got);
				return (int)got;
			}
			if (e.op_context != (cq == s->txcq ? (void *)&s->tx_ctx : (void *)&s->rx_ctx))
				return printf("completion of context %p on the wrong CQ\n", e.op_context),
				       -FI_EOTHER;
		}
	}
	return 0;
}

static void close_side(struct side *s)
{
	if (s->ps) {
		fi_poll_del(s->ps, &s->txcq->fid, 0);
		fi_poll_del(s->ps, &s->rxcq->fid, 0);
		if (s->counters) {
			fi_poll_del(s->ps, &s->txcntr->fid, 0);
			fi_poll_del(s->ps, &s->rxcntr->fid, 0);
		}
	}
	struct fid *f[] = { s->ep ? &s->ep->fid : NULL, s->pep ? &s->pep->fid : NULL,
			    s->ps ? &s->ps->fid : NULL, s->mr ? &s->mr->fid : NULL,
			    s->txcq ? &s->txcq->fid : NULL, s->rxcq ? &s->rxcq->fid : NULL,
			    s->txcntr ? &s->txcntr->fid : NULL, s->rxcntr ? &s->rxcntr->fid : NULL,
			    s->dom ? &s->dom->fid : NULL, s->eq ? &s->eq->fid : NULL,
			    s->fab ? &s->fab->fid : NULL };
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
		if (f[i])
			fi_close(f[i]);
	fi_freeinfo(s->info);
	fi_freeinfo(s->pinfo);
	free(s->buf);
}

/* One side's run: 0 when the peer's greeting is in the receive buffer. */
static int side_run(struct side *s, const char *prov, int to_peer, int from_peer)
{
	const char *who = s->server ? "server" : "client";
	int r = connect_sides(s, prov, to_peer, from_peer), bad = 1;
	if (r)
		printf("%s: connect %d\n", who, r);
	else if ((r = send_recv(s)))
		printf("%s: send_recv %d\n", who, r);
	else {
		const char *want = greeting(!s->server);
		size_t got_len = strlen(s->rx_buf) + 1, want_len = strlen(want) + 1;
		bad = got_len != want_len || strcmp(s->rx_buf, want) != 0;
		if (bad)
			printf("%s: received \"%.40s\" (%zu bytes with its NUL), not \"%s\" (%zu)\n",
			       who, s->rx_buf, got_len, want, want_len);
	}
	/* Both sides finish before either closes. */
	char c = 1;
	if (write(to_peer, &c, 1) != 1 || read(from_peer, &c, 1) != 1)
		bad = 1;
	close_side(s);
	return bad;
}

int main(int argc, char **argv)
{
	start();
	if (argc < 2) {
		fprintf(stderr, "usage: poll_msg PROVIDER [queue|counter] [ROUNDS] [SIZE]\n");
		return 2;
	}
	int counters = argc > 2 && !strcmp(argv[2], "counter");
	int rounds = argc > 3 ? atoi(argv[3]) : 1, good = 0;
	size_t size = argc > 4 ? strtoul(argv[4], NULL, 0) : 0;
	size_t xfer = size > 1024 ? size : 1024;
	for (int round = 0; round < rounds; round++) {
		int a[2], b[2];
		if (pipe(a) || pipe(b))
			return 2;
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			struct side c = { .server = 0, .counters = counters, .size = size, .xfer = xfer };
			close(a[1]);
			close(b[0]);
			_exit(side_run(&c, argv[1], b[1], a[0]));
		}
		close(a[0]);
		close(b[1]);
		struct side s = { .server = 1, .counters = counters, .size = size, .xfer = xfer };
		int bad = side_run(&s, argv[1], a[1], b[0]);
		int st = 0;
		waitpid(pid, &st, 0);
		close(a[1]);
		close(b[0]);
		if (!bad && WIFEXITED(st) && WEXITSTATUS(st) == 0)
			good++;
	}
	printf("rounds ok: %d of %d\n", good, rounds);
	CHECK("each side's receive buffer holds the peer's greeting", good == rounds);
	return finish();
}
