/* close_order: what a peer sent before closing counts before its close.
 *
 * Each round forks a target that registers a region, tells the writer its
 * address and key through a pipe, waits until the writer's last write has
 * landed, and closes its endpoint at once. The writer issues WRITES RMA
 * writes (counted by a counter) and waits for the counter: every write was
 * answered before the target closed, so none may fail (a close acted on
 * before the answers that came first fails them with FI_ECONNRESET).
 *
 * Mode "dc" instead has the writer send WRITES messages with
 * FI_DELIVERY_COMPLETE to the target, which receives them all and closes
 * at once: every send was delivered before the close, so none may fail.
 *
 * A busy child competes for the CPUs throughout (the race needs the two
 * processes to share a core now and then; nothing is pinned).
 *
 * Usage: close_order PROVIDER ROUNDS WRITES [rma|dc]
 * Prints one line per failed round and "rounds ok: N of M", then
 * ALL OK / FAILED n (common.h). */
#include "common.h"
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

struct side {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_cntr *cntr;
};

struct card {
	char name[64];
	size_t namelen;
	uint64_t addr, key;
};

static int open_side(struct side *s, const char *prov, int dc)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .size = 256 };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	struct fi_cntr_attr cntr_attr = { .events = FI_CNTR_EVENTS_COMP };
	hints->caps = dc ? FI_MSG : FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(prov);
	int rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &s->info);
	fi_freeinfo(hints);
	if (rc)
		return rc;
	if ((rc = fi_fabric(s->info->fabric_attr, &s->fabric, NULL)) ||
	    (rc = fi_domain(s->fabric, s->info, &s->domain, NULL)) ||
	    (rc = fi_cq_open(s->domain, &cq_attr, &s->cq, NULL)) ||
	    (rc = fi_av_open(s->domain, &av_attr, &s->av, NULL)) ||
	    (rc = fi_cntr_open(s->domain, &cntr_attr, &s->cntr, NULL)) ||
	    (rc = fi_endpoint(s->domain, s->info, &s->ep, NULL)) ||
	    (rc = fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (rc = fi_ep_bind(s->ep, &s->av->fid, 0)) ||
	    (rc = fi_ep_bind(s->ep, &s->cntr->fid, dc ? FI_SEND : FI_WRITE)) ||
	    (rc = fi_enable(s->ep)))
		return rc;
	return 0;
}

/* The target: answers the writes (or receives the sends), closes its
 * endpoint the moment the last one is in, then lingers until the writer
 * is done (its segment must not vanish as a dead process would). */
static int target(const char *prov, int writes, int dc, int to_writer, int from_writer)
{
	struct side s = { 0 };
	static volatile uint64_t region[1024];
	static char bufs[64][8];
	struct fid_mr *mr = NULL;
	struct card c = { .namelen = sizeof c.name };
	struct fi_cq_entry done[16];
	if (open_side(&s, prov, dc))
		return 2;
	if (!dc) {
		if (fi_mr_reg(s.domain, (void *)region, sizeof region, FI_REMOTE_WRITE, 0, 0, 0,
			      &mr, NULL))
			return 3;
		c.key = fi_mr_key(mr);
		c.addr = s.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR ? (uint64_t)(uintptr_t)region : 0;
	}
	if (fi_getname(&s.ep->fid, c.name, &c.namelen))
		return 4;
	int got = 0;
	if (dc) {
		/* Receives posted before the writer starts. */
		for (int i = 0; i < writes && i < 64; i++)
			if (fi_recv(s.ep, bufs[i], sizeof bufs[i], NULL, FI_ADDR_UNSPEC, NULL))
				return 5;
	}
	if (write(to_writer, &c, sizeof c) != sizeof c)
		return 6;
	while (dc ? got < writes : region[writes - 1] != (uint64_t)writes) {
		ssize_t n = fi_cq_read(s.cq, done, 16);
		if (n > 0) {
			got += (int)n;
			for (int i = 0; i < n && dc; i++)
				fi_recv(s.ep, bufs[0], sizeof bufs[0], NULL, FI_ADDR_UNSPEC, NULL);
		}
	}
	/* The last write landed (its answer is on its way): close now. */
	fi_close(&s.ep->fid);
	char bye;
	if (read(from_writer, &bye, 1) != 1)
		return 7;
	if (mr)
		fi_close(&mr->fid);
	fi_close(&s.cntr->fid);
	fi_close(&s.av->fid);
	fi_close(&s.cq->fid);
	fi_close(&s.domain->fid);
	fi_close(&s.fabric->fid);
	fi_freeinfo(s.info);
	return 0;
}

/* One round as the writer: 0 when every operation succeeded. */
static int writer(const char *prov, int writes, int dc, int from_target, int to_target)
{
	struct side s = { 0 };
	struct card c;
	static uint64_t vals[1024];
	fi_addr_t peer;
	if (open_side(&s, prov, dc))
		return -2;
	if (read(from_target, &c, sizeof c) != sizeof c)
		return -3;
	if (fi_av_insert(s.av, c.name, 1, &peer, 0, NULL) != 1)
		return -4;
	for (int i = 0; i < writes; i++) {
		ssize_t r;
		vals[i] = (uint64_t)i + 1;
		do {
			if (dc) {
				struct iovec iov = { .iov_base = &vals[i], .iov_len = 8 };
				struct fi_msg m = { .msg_iov = &iov, .iov_count = 1, .addr = peer };
				r = fi_sendmsg(s.ep, &m, FI_COMPLETION | FI_DELIVERY_COMPLETE);
			} else {
				r = fi_write(s.ep, &vals[i], 8, NULL, peer,
					     c.addr + (uint64_t)i * 8, c.key, NULL);
			}
			if (r == -FI_EAGAIN)
				fi_cntr_read(s.cntr);
		} while (r == -FI_EAGAIN);
		if (r)
			return -5;
	}
	/* Wait (bounded) until every operation finished, one way or the other. */
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int bad = 0;
	for (;;) {
		struct fi_cq_entry e[16];
		fi_cq_read(s.cq, e, 16);
		uint64_t ok = fi_cntr_read(s.cntr), err = fi_cntr_readerr(s.cntr);
		if (ok + err >= (uint64_t)writes) {
			bad = (int)err;
			break;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 10) {
			bad = -6;
			break;
		}
	}
	char bye = 1;
	if (write(to_target, &bye, 1) != 1)
		bad = bad ? bad : -7;
	fi_close(&s.ep->fid);
	fi_close(&s.cntr->fid);
	fi_close(&s.av->fid);
	fi_close(&s.cq->fid);
	fi_close(&s.domain->fid);
	fi_close(&s.fabric->fid);
	fi_freeinfo(s.info);
	return bad;
}

int main(int argc, char **argv)
{
	start();
	if (argc < 4) {
		fprintf(stderr, "usage: close_order PROVIDER ROUNDS WRITES [rma|dc]\n");
		return 2;
	}
	const char *prov = argv[1];
	int rounds = atoi(argv[2]), writes = atoi(argv[3]);
	int dc = argc > 4 && !strcmp(argv[4], "dc");
	if (writes < 1 || writes > 1024 || (dc && writes > 64)) {
		fprintf(stderr, "WRITES out of range\n");
		return 2;
	}
	pid_t hog = fork();
	if (hog == 0) {
		for (volatile unsigned long x = 0;; x++)
			;
	}
	int good = 0;
	for (int r = 0; r < rounds; r++) {
		int a[2], b[2];
		if (pipe(a) || pipe(b))
			return 2;
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			close(a[0]);
			close(b[1]);
			_exit(target(prov, writes, dc, a[1], b[0]));
		}
		close(a[1]);
		close(b[0]);
		int bad = writer(prov, writes, dc, a[0], b[1]);
		int st = 0;
		waitpid(pid, &st, 0);
		close(a[0]);
		close(b[1]);
		if (bad == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
			good++;
		else
			printf("round %d: writer %d, target status %d\n", r, bad,
			       WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	kill(hog, SIGKILL);
	waitpid(hog, NULL, 0);
	printf("rounds ok: %d of %d\n", good, rounds);
	CHECK("every operation before the close succeeded", good == rounds);
	return finish();
}
