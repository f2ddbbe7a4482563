/*
 * coll_latency.c: latency of collectives (fi_collective(3)) between two
 * processes through a libfabric library: fi_barrier, an 8 B fi_allreduce
 * (FI_UINT64 FI_SUM) and a 4 KiB fi_broadcast (root rank 0), each timed
 * one by one. bench/compare.sh runs it (OPS containing coll); by hand:
 *
 *   cc -O2 -o coll_latency bench/coll_latency.c -lfabric
 *   [LD_LIBRARY_PATH=DIR_WITH_OFIS_libfabric.so.1] FI_TCP_IFACE=lo \
 *       ./coll_latency PROVIDER [ITERS [OPS]]
 *
 * The parent forks two ranks, pinned to cpus 0 and 1, which open an RDM
 * endpoint of PROVIDER with FI_COLLECTIVE, exchange addresses through
 * shared memory, join the group of both and run each operation ITERS
 * times (default 20000) after ITERS/10 warm-up ones, reading the CQ in a
 * busy loop (OPS, a string of letters b, a and c, picks barrier,
 * allreduce and broadcast: default "bac"). Rank 0 prints one line per
 * operation:
 *   "op <name> iters <n> median_us <m> p99_us <p>"
 * and the results are checked (a wrong sum or broadcast exits 2).
 */
#define _GNU_SOURCE
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                           \
	do {                                                                  \
		int rc_ = (int)(call);                                        \
		if (rc_) {                                                    \
			fprintf(stderr, "[%d] %s: %s\n", rank, #call,          \
				fi_strerror(-rc_));                           \
			exit(1);                                              \
		}                                                             \
	} while (0)

struct shared {
	int arrived;
	size_t len[2];
	char addr[2][256];
};

static struct shared *sh;
static int rank;
static struct fid_cq *cq;
static struct fid_eq *eq;

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Reads one completion (busy); exits on an error entry. */
static void reap(void)
{
	struct fi_cq_tagged_entry e;
	for (;;) {
		ssize_t r = fi_cq_read(cq, &e, 1);
		if (r == 1)
			return;
		if (r == -FI_EAGAIN)
			continue;
		struct fi_cq_err_entry ee = { 0 };
		fi_cq_readerr(cq, &ee, 0);
		fprintf(stderr, "[%d] fi_cq_read: %s (%s)\n", rank,
			fi_strerror((int)-r), fi_strerror(ee.err));
		exit(1);
	}
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

enum op { BARRIER, ALLREDUCE, BROADCAST };

static void run(struct fid_ep *ep, fi_addr_t coll, enum op op, long iters)
{
	static const char *names[] = { "barrier", "allreduce8", "broadcast4k" };
	static unsigned char buf[4096];
	double *t = malloc(sizeof(double) * (size_t)iters);
	long warm = iters / 10;
	if (!t)
		exit(1);
	for (long i = -warm; i < iters; i++) {
		uint64_t one = (uint64_t)rank + 1, sum = 0;
		if (op == BROADCAST)
			memset(buf, rank == 0 ? (int)(i & 0xff) : 0, sizeof buf);
		double t0 = now_us();
		ssize_t r;
		do {
			if (op == BARRIER)
				r = fi_barrier(ep, coll, NULL);
			else if (op == ALLREDUCE)
				r = fi_allreduce(ep, &one, 1, NULL, &sum, NULL, coll,
						 FI_UINT64, FI_SUM, 0, NULL);
			else
				r = fi_broadcast(ep, buf, sizeof buf, NULL, coll, 0,
						 FI_UINT8, 0, NULL);
			if (r == -FI_EAGAIN)
				fi_cq_read(cq, NULL, 0);
		} while (r == -FI_EAGAIN);
		CHECK(r);
		reap();
		double t1 = now_us();
		if (i >= 0)
			t[i] = t1 - t0;
		if (op == ALLREDUCE && sum != 3) {
			fprintf(stderr, "[%d] allreduce gave %lu\n", rank,
				(unsigned long)sum);
			exit(2);
		}
		if (op == BROADCAST && (buf[0] != (unsigned char)(i & 0xff) ||
					buf[4095] != (unsigned char)(i & 0xff))) {
			fprintf(stderr, "[%d] broadcast gave %u\n", rank, buf[0]);
			exit(2);
		}
	}
	qsort(t, (size_t)iters, sizeof(double), cmp);
	if (rank == 0)
		printf("op %s iters %ld median_us %.2f p99_us %.2f\n", names[op],
		       iters, t[iters / 2], t[(iters * 99) / 100]);
	fflush(stdout);
	free(t);
}

static const char *ops = "bac";

static void child(const char *prov, long iters)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_ep *ep;
	cpu_set_t cpus;

	CPU_ZERO(&cpus);
	CPU_SET(rank, &cpus);
	sched_setaffinity(0, sizeof cpus, &cpus);
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED | FI_COLLECTIVE;
	hints->domain_attr->mr_mode =
		FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_UNSPEC };
	CHECK(fi_eq_open(fab, &eq_attr, &eq, NULL));
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED,
				      .wait_obj = FI_WAIT_NONE };
	CHECK(fi_cq_open(dom, &cq_attr, &cq, NULL));
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	CHECK(fi_av_open(dom, &av_attr, &av, NULL));
	CHECK(fi_endpoint(dom, info, &ep, NULL));
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(ep, &eq->fid, 0));
	CHECK(fi_enable(ep));
	sh->len[rank] = sizeof sh->addr[rank];
	CHECK(fi_getname(&ep->fid, sh->addr[rank], &sh->len[rank]));
	__atomic_add_fetch(&sh->arrived, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&sh->arrived, __ATOMIC_SEQ_CST) < 2)
		usleep(100);
	fi_addr_t fa[2];
	for (int i = 0; i < 2; i++)
		if (fi_av_insert(av, sh->addr[i], 1, &fa[i], 0, NULL) != 1) {
			fprintf(stderr, "[%d] fi_av_insert failed\n", rank);
			exit(1);
		}
	struct fi_av_set_attr sa = { .count = 2, .start_addr = fa[0],
				     .end_addr = fa[1], .stride = 1 };
	struct fid_av_set *set;
	CHECK(fi_av_set(av, &sa, &set, NULL));
	fi_addr_t set_addr;
	CHECK(fi_av_set_addr(set, &set_addr));
	struct fid_mc *mc;
	CHECK(fi_join_collective(ep, set_addr, set, 0, &mc, NULL));
	double end = now_us() + 30e6;
	for (;;) {
		struct fi_eq_entry e;
		uint32_t ev;
		ssize_t n = fi_eq_read(eq, &ev, &e, sizeof e, 0);
		if (n == sizeof e && ev == FI_JOIN_COMPLETE)
			break;
		if (n != -FI_EAGAIN || now_us() > end) {
			fprintf(stderr, "[%d] join: %zd event %u\n", rank, n, ev);
			exit(1);
		}
		/* Some libraries progress the join from the CQ only. */
		fi_cq_read(cq, NULL, 0);
	}
	fi_addr_t coll = fi_mc_addr(mc);
	if (strchr(ops, 'b'))
		run(ep, coll, BARRIER, iters);
	if (strchr(ops, 'a'))
		run(ep, coll, ALLREDUCE, iters);
	if (strchr(ops, 'c'))
		run(ep, coll, BROADCAST, iters);
	/* Both done before either closes. */
	CHECK(fi_barrier(ep, coll, NULL));
	reap();
	fi_close(&mc->fid);
	fi_close(&set->fid);
	fi_close(&ep->fid);
	fi_close(&av->fid);
	fi_close(&cq->fid);
	fi_close(&eq->fid);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "shm";
	long iters = argc > 2 ? atol(argv[2]) : 20000;
	pid_t pids[2];
	int failed = 0;

	if (iters < 10)
		iters = 10;
	if (argc > 3)
		ops = argv[3];
	sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	memset(sh, 0, sizeof *sh);
	for (int i = 0; i < 2; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			rank = i;
			child(prov, iters);
			_exit(0);
		}
	}
	for (int i = 0; i < 2; i++) {
		int st;
		waitpid(pids[i], &st, 0);
		failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	}
	return failed;
}
