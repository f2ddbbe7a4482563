/* poll_rdm: two processes (server and client) on 127.0.0.1, RDM endpoints
 * with separate transmit and receive CQs (or counters) in a poll set, the
 * way a fabtests-style client waits: one receive posted before anything
 * else, the client's address sent to the server in a message (the server
 * takes it with that receive and posts another, the client waits for a
 * one-byte answer and posts another), then each side sends its greeting
 * and waits with fi_poll until its send and receive are complete, reading
 * one completion per CQ fi_poll names. The receive buffer must then hold
 * the peer's greeting.
 *
 * Usage: poll_rdm PROVIDER [queue|counter] [ROUNDS]
 * One buffer holds the receive area then the send area, registered once
 * (FI_MR_LOCAL), as such clients allocate it. */
#include "common.h"
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_POLL 10
#define XFER 1024

struct side {
	int server, counters, table;
	struct fi_info *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_cq *txcq, *rxcq;
	struct fid_cntr *txcntr, *rxcntr;
	struct fid_ep *ep;
	struct fid_poll *ps;
	struct fid_mr *mr;
	void *desc;
	char *buf, *rx_buf, *tx_buf;
	fi_addr_t peer;
	uint64_t tx_seq, rx_seq, tx_done, rx_done;
	struct fi_context tx_ctx, rx_ctx;
};

static const char *service;

static int open_side(struct side *s, const char *prov)
{
	struct fi_info *hints = fi_allocinfo();
	int r;
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG;
	hints->mode = FI_CONTEXT;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	if (service)
		r = fi_getinfo(FI_VERSION(1, 17), s->server ? NULL : "127.0.0.1", service,
			       s->server ? FI_SOURCE : 0, hints, &s->info);
	else
		r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &s->info);
	fi_freeinfo(hints);
	if (r)
		return r;
	if ((r = fi_fabric(s->info->fabric_attr, &s->fab, NULL)) ||
	    (r = fi_domain(s->fab, s->info, &s->dom, NULL)))
		return r;
	/* CQs in both modes (tcp;ofi_rxm wants them); counters as well with
	 * "counter", and then they alone are in the poll set. */
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
	struct fi_av_attr aa = { .type = s->info->domain_attr->av_type == FI_AV_UNSPEC ?
						 FI_AV_MAP : s->info->domain_attr->av_type };
	s->table = aa.type == FI_AV_TABLE;
	if ((r = fi_av_open(s->dom, &aa, &s->av, NULL)) ||
	    (r = fi_endpoint(s->dom, s->info, &s->ep, NULL)) ||
	    (r = fi_ep_bind(s->ep, &s->av->fid, 0)))
		return r;
	if ((r = fi_ep_bind(s->ep, &s->txcq->fid, FI_TRANSMIT)) ||
	    (r = fi_ep_bind(s->ep, &s->rxcq->fid, FI_RECV)))
		return r;
	if (s->counters && ((r = fi_ep_bind(s->ep, &s->txcntr->fid, FI_SEND)) ||
			    (r = fi_ep_bind(s->ep, &s->rxcntr->fid, FI_RECV))))
		return r;
	struct fi_poll_attr pa = { 0 };
	if ((r = fi_poll_open(s->dom, &pa, &s->ps)))
		return r;
	if (s->counters) {
		if ((r = fi_poll_add(s->ps, &s->txcntr->fid, 0)) ||
		    (r = fi_poll_add(s->ps, &s->rxcntr->fid, 0)))
			return r;
	} else {
		if ((r = fi_poll_add(s->ps, &s->txcq->fid, 0)) ||
		    (r = fi_poll_add(s->ps, &s->rxcq->fid, 0)))
			return r;
	}
	if ((r = fi_enable(s->ep)))
		return r;
	s->buf = calloc(1, 2 * XFER);
	s->rx_buf = s->buf;
	s->tx_buf = s->buf + XFER;
	if ((r = fi_mr_reg(s->dom, s->buf, 2 * XFER, FI_SEND | FI_RECV, 0, 0, 0, &s->mr, NULL)))
		return r;
	s->desc = fi_mr_desc(s->mr);
	return 0;
}

static void close_side(struct side *s)
{
	if (s->ps) {
		if (s->counters) {
			fi_poll_del(s->ps, &s->txcntr->fid, 0);
			fi_poll_del(s->ps, &s->rxcntr->fid, 0);
		} else {
			fi_poll_del(s->ps, &s->txcq->fid, 0);
			fi_poll_del(s->ps, &s->rxcq->fid, 0);
		}
	}
	struct fid *f[] = { s->ep ? &s->ep->fid : NULL, s->ps ? &s->ps->fid : NULL,
			    s->mr ? &s->mr->fid : NULL, s->txcq ? &s->txcq->fid : NULL,
			    s->rxcq ? &s->rxcq->fid : NULL, s->txcntr ? &s->txcntr->fid : NULL,
			    s->rxcntr ? &s->rxcntr->fid : NULL, s->av ? &s->av->fid : NULL,
			    s->dom ? &s->dom->fid : NULL, s->fab ? &s->fab->fid : NULL };
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
		if (f[i])
			fi_close(f[i]);
	fi_freeinfo(s->info);
	free(s->buf);
}

/* Reads one completion of `cq` (or waits for the counter to reach `want`)
 * within 10 s; 0 or an error. */
static int wait_one(struct side *s, int rx)
{
	double end = now_s() + 10;
	uint64_t *done = rx ? &s->rx_done : &s->tx_done;
	uint64_t want = rx ? s->rx_seq : s->tx_seq;
	while (*done < want && now_s() < end) {
		if (s->counters) {
			*done = fi_cntr_read(rx ? s->rxcntr : s->txcntr);
			continue;
		}
		struct fi_cq_entry e;
		ssize_t r = fi_cq_read(rx ? s->rxcq : s->txcq, &e, 1);
		if (r == 1)
			(*done)++;
		else if (r != -FI_EAGAIN)
			return (int)r;
	}
	return *done >= want ? 0 : -FI_ETIMEDOUT;
}

static int post_rx(struct side *s)
{
	ssize_t r;
	double end = now_s() + 10;
	/* From the peer once it is known (a client that does not ask for
	 * FI_DIRECTED_RECV: the address is ignored). */
	while ((r = fi_recv(s->ep, s->rx_buf, XFER, s->desc, s->peer, &s->rx_ctx)) == -FI_EAGAIN &&
	       now_s() < end)
		;
	if (!r)
		s->rx_seq++;
	return (int)r;
}

static int post_tx(struct side *s, size_t len)
{
	ssize_t r;
	double end = now_s() + 10;
	while ((r = fi_send(s->ep, s->tx_buf, len, s->desc, s->peer, &s->tx_ctx)) == -FI_EAGAIN &&
	       now_s() < end)
		;
	if (!r)
		s->tx_seq++;
	return (int)r;
}

/* The address exchange: the client sends its name, the server answers one
 * byte once it reposted its receive. */
static int exchange(struct side *s, const char *server_name, size_t server_len)
{
	int r;
	if (!s->server) {
		if (fi_av_insert(s->av, server_name, 1, &s->peer, 0, NULL) != 1)
			return -FI_EINVAL;
		size_t len = XFER;
		if ((r = fi_getname(&s->ep->fid, s->tx_buf, &len)))
			return r;
		if ((r = post_tx(s, len)) || (r = wait_one(s, 0)))
			return r;
		if ((r = wait_one(s, 1)))
			return r;
		return post_rx(s);
	}
	if ((r = wait_one(s, 1)))
		return r;
	if (fi_av_insert(s->av, s->rx_buf, 1, s->table ? NULL : &s->peer, 0, NULL) != 1)
		return -FI_EINVAL;
	if ((r = post_rx(s)))
		return r;
	if (s->table)
		s->peer = 0;
	if ((r = post_tx(s, 1)))
		return r;
	return wait_one(s, 0);
}

/* Sends the greeting and waits on the poll set; 0 or an error. */
static int send_recv(struct side *s)
{
	snprintf(s->tx_buf, XFER, "Hello from %s!", s->server ? "server" : "client");
	int r = post_tx(s, XFER);
	if (r)
		return r;
	uint64_t txc = 0, rxc = 0;
	double end = now_s() + 10;
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
				return -FI_EOTHER;
			}
			struct fi_cq_entry e;
			ssize_t got = fi_cq_read(cq, &e, 1);
			if (got < 0)
				return (int)got;
		}
	}
	return 0;
}

/* One side's run: 0 when the peer's greeting is in the receive buffer. */
static int side_run(struct side *s, const char *prov, int to_peer, int from_peer)
{
	char name[256];
	size_t len = sizeof name;
	int r = open_side(s, prov);
	if (r)
		return printf("%s: open %d\n", s->server ? "server" : "client", r), 1;
	if ((r = post_rx(s)))
		return printf("post rx %d\n", r), 1;
	if (s->server) {
		if (fi_getname(&s->ep->fid, name, &len) || write(to_peer, &len, sizeof len) != sizeof len ||
		    write(to_peer, name, len) != (ssize_t)len)
			return 1;
	} else if (read(from_peer, &len, sizeof len) != sizeof len || len > sizeof name ||
		   read(from_peer, name, len) != (ssize_t)len) {
		return 1;
	}
	if (service && !s->server) {
		/* Addressed as getinfo's dest_addr names the server. */
		len = s->info->dest_addrlen;
		memcpy(name, s->info->dest_addr, len);
	}
	if ((r = exchange(s, name, len)))
		return printf("%s: exchange %d\n", s->server ? "server" : "client", r), 1;
	if ((r = send_recv(s)))
		return printf("%s: send_recv %d\n", s->server ? "server" : "client", r), 1;
	const char *want = s->server ? "Hello from client!" : "Hello from server!";
	int bad = strcmp(s->rx_buf, want) != 0;
	if (bad)
		printf("%s: received \"%.40s\" (%zu bytes), not \"%s\"\n", s->server ? "server" : "client",
		       s->rx_buf, strlen(s->rx_buf), want);
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
		fprintf(stderr, "usage: poll_rdm PROVIDER [queue|counter] [ROUNDS]\n");
		return 2;
	}
	int counters = argc > 2 && !strcmp(argv[2], "counter");
	int rounds = argc > 3 ? atoi(argv[3]) : 1, good = 0;
	service = argc > 4 ? argv[4] : NULL;
	for (int round = 0; round < rounds; round++) {
		int a[2], b[2];
		if (pipe(a) || pipe(b))
			return 2;
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			struct side c = { .server = 0, .counters = counters, .peer = FI_ADDR_UNSPEC };
			close(a[1]);
			close(b[0]);
			_exit(side_run(&c, argv[1], b[1], a[0]));
		}
		close(a[0]);
		close(b[1]);
		struct side s = { .server = 1, .counters = counters, .peer = FI_ADDR_UNSPEC };
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
