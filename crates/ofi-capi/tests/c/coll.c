/* Collectives through the C ABI (fi_collective(3), fi_av_set(3)) with N
 * processes: the parent forks N children, each opens one RDM endpoint of
 * PROV, they exchange addresses through shared memory and insert them in
 * rank order (fi_addr i is rank i), then run SCENARIO:
 *
 * - all:   the AV sets (universe, a strided subset, a union of two sets,
 *          intersect / diff / insert / remove), joins, every collective
 *          against computed results, every op x datatype of allreduce
 *          against fi_query_collective and a computed expectation, two
 *          groups running at once on one endpoint, and bad input (a set of
 *          another AV, an unknown op, a count too large, a group not
 *          joined, a root outside the group);
 * - basic: the same without the op x datatype matrix;
 * - kill:  after a barrier the last rank kills itself (SIGKILL); the
 *          others' barrier and allreduce must fail within a bound;
 * - killmid: the last rank kills itself in the middle of a 256 KiB
 *          allreduce: the others' allreduce ends (completes right or
 *          fails) within the bound, their next barrier and allreduce fail
 *          within it;
 * - ahead: rank 0 completes 64 broadcasts of 4 KiB as their root before
 *          the others start theirs (run with a small FI_COLL_HELD_BYTES):
 *          the frames past the bound wait, every broadcast arrives.
 *
 * Usage: coll PROV N SCENARIO. Prints "[rank] ..." lines and, from the
 * parent, "ALL OK" when every child passed (see tests/collective.rs). */
#include "common.h"
#include <complex.h>
#include <rdma/fi_collective.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXN 16
#define WAIT_S 30.0

struct shared {
	int arrived[16];
	size_t len[MAXN];
	char addr[MAXN][256];
};

static struct shared *sh;
static int rank, nprocs;

#define RCHECK(what, cond) do { \
	if (cond) printf("[%d] ok %s\n", rank, what); \
	else { printf("[%d] FAIL %s (line %d)\n", rank, what, __LINE__); failures++; } \
} while (0)

/* Every process (but `absent` of them) reaches `phase`. */
static void meet(int phase, int absent)
{
	__atomic_add_fetch(&sh->arrived[phase], 1, __ATOMIC_SEQ_CST);
	double end = now_s() + 120;
	while (__atomic_load_n(&sh->arrived[phase], __ATOMIC_SEQ_CST) < nprocs - absent && now_s() < end)
		usleep(200);
}

struct node {
	struct fi_info *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_eq *eq;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_ep *ep;
};

static int node_open(struct node *x, const char *prov)
{
	struct fi_info *hints = fi_allocinfo();
	int r;

	memset(x, 0, sizeof *x);
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED | FI_COLLECTIVE;
	hints->mode = 0;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &x->info);
	fi_freeinfo(hints);
	if (r)
		return r;
	if ((r = fi_fabric(x->info->fabric_attr, &x->fab, NULL)))
		return r;
	if ((r = fi_domain(x->fab, x->info, &x->dom, NULL)))
		return r;
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_UNSPEC };
	if ((r = fi_eq_open(x->fab, &eq_attr, &x->eq, NULL)))
		return r;
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC };
	if ((r = fi_cq_open(x->dom, &cq_attr, &x->cq, NULL)))
		return r;
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	if ((r = fi_av_open(x->dom, &av_attr, &x->av, NULL)))
		return r;
	if ((r = fi_endpoint(x->dom, x->info, &x->ep, NULL)))
		return r;
	if ((r = fi_ep_bind(x->ep, &x->av->fid, 0)) ||
	    (r = fi_ep_bind(x->ep, &x->cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (r = fi_ep_bind(x->ep, &x->eq->fid, 0)))
		return r;
	return fi_enable(x->ep);
}

static void node_close(struct node *x)
{
	if (x->ep)
		fi_close(&x->ep->fid);
	if (x->av)
		fi_close(&x->av->fid);
	if (x->cq)
		fi_close(&x->cq->fid);
	if (x->eq)
		fi_close(&x->eq->fid);
	if (x->dom)
		fi_close(&x->dom->fid);
	if (x->fab)
		fi_close(&x->fab->fid);
	if (x->info)
		fi_freeinfo(x->info);
}

/* An operation's outcome. */
struct done {
	void *ctx;
	uint64_t flags;
	int err;
};

/* Reads `k` completions (successes and error entries) within `secs`;
 * returns how many were read. */
static int wait_n(struct node *x, struct done *out, int k, double secs)
{
	int got = 0;
	double end = now_s() + secs;
	while (got < k && now_s() < end) {
		struct fi_cq_tagged_entry e;
		ssize_t r = fi_cq_sread(x->cq, &e, 1, NULL, 100);
		if (r == 1) {
			out[got++] = (struct done){ e.op_context, e.flags, 0 };
		} else if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry ee = { 0 };
			if (fi_cq_readerr(x->cq, &ee, 0) == 1)
				out[got++] = (struct done){ ee.op_context, ee.flags, ee.err };
		} else if (r != -FI_EAGAIN) {
			printf("[%d] FAIL fi_cq_sread: %zd\n", rank, r);
			failures++;
			return got;
		}
	}
	return got;
}

/* Waits for the completions of the `k` contexts in `ctxs`, which must all
 * succeed with FI_COLLECTIVE. */
static int expect_ok(struct node *x, void **ctxs, int k, const char *what)
{
	struct done d[16];
	int n = wait_n(x, d, k, WAIT_S), ok = n == k;
	for (int i = 0; i < n; i++) {
		int known = 0;
		for (int j = 0; j < k; j++)
			known |= d[i].ctx == ctxs[j];
		if (!known || d[i].err || !(d[i].flags & FI_COLLECTIVE)) {
			printf("[%d] %s: completion ctx %p err %d flags %#lx\n", rank, what, d[i].ctx, d[i].err,
			       (unsigned long)d[i].flags);
			ok = 0;
		}
	}
	if (!ok) {
		printf("[%d] FAIL %s: %d of %d completions\n", rank, what, n, k);
		failures++;
	}
	return ok;
}

/* Joins the group of `set`; waits for FI_JOIN_COMPLETE. */
static struct fid_mc *join(struct node *x, struct fid_av_set *set, const char *what)
{
	fi_addr_t addr;
	struct fid_mc *mc = NULL;
	static int ctx;
	char w[128];
	int r = fi_av_set_addr(set, &addr);
	snprintf(w, sizeof w, "%s: fi_av_set_addr", what);
	RCHECK(w, r == 0);
	r = fi_join_collective(x->ep, addr, set, 0, &mc, &ctx);
	snprintf(w, sizeof w, "%s: fi_join_collective %d", what, r);
	RCHECK(w, r == 0);
	if (r)
		return NULL;
	double end = now_s() + WAIT_S;
	while (now_s() < end) {
		struct fi_eq_entry e;
		uint32_t ev;
		ssize_t n = fi_eq_sread(x->eq, &ev, &e, sizeof e, 100, 0);
		if (n == -FI_EAGAIN)
			continue;
		snprintf(w, sizeof w, "%s: FI_JOIN_COMPLETE naming the group and the join's context", what);
		RCHECK(w, n == sizeof e && ev == FI_JOIN_COMPLETE && e.fid == &mc->fid && e.context == &ctx);
		return mc;
	}
	snprintf(w, sizeof w, "%s: FI_JOIN_COMPLETE in time", what);
	RCHECK(w, 0);
	return mc;
}

static int even(int i) { return i % 2 == 0; }

/* ---- the allreduce matrix ---------------------------------------------- */

#define COUNT 5

typedef __int128 i128;
typedef unsigned __int128 u128;

#define BITOPS_YES \
	case FI_BOR: a[i] = a[i] | b[i]; break; \
	case FI_BAND: a[i] = a[i] & b[i]; break; \
	case FI_BXOR: a[i] = a[i] ^ b[i]; break;
#define BITOPS_NO

/* a = a (op) b, elementwise, with C arithmetic (fi_atomic(3)). */
#define DEFINE_REAL(NAME, T, BITS) \
static void fold_##NAME(int op, T *a, const T *b) \
{ \
	for (int i = 0; i < COUNT; i++) \
		switch (op) { \
		case FI_MIN: a[i] = b[i] < a[i] ? b[i] : a[i]; break; \
		case FI_MAX: a[i] = b[i] > a[i] ? b[i] : a[i]; break; \
		case FI_SUM: a[i] = a[i] + b[i]; break; \
		case FI_PROD: a[i] = a[i] * b[i]; break; \
		case FI_LOR: a[i] = (a[i] != 0) || (b[i] != 0); break; \
		case FI_LAND: a[i] = (a[i] != 0) && (b[i] != 0); break; \
		case FI_LXOR: a[i] = (a[i] != 0) != (b[i] != 0); break; \
		case FI_ATOMIC_WRITE: a[i] = b[i]; break; \
		BITS \
		} \
} \
static void fill_##NAME(T *v, int r) \
{ \
	for (int i = 0; i < COUNT; i++) \
		v[i] = (T)((r * 7 + i * 3 + 1) % 3); \
} \
static int same_##NAME(const T *a, const T *b) \
{ \
	for (int i = 0; i < COUNT; i++) \
		if (!(a[i] == b[i])) \
			return 0; \
	return 1; \
}

#define DEFINE_CPLX(NAME, T, R) \
static void fold_##NAME(int op, T *a, const T *b) \
{ \
	for (int i = 0; i < COUNT; i++) \
		switch (op) { \
		case FI_SUM: a[i] = a[i] + b[i]; break; \
		case FI_PROD: a[i] = a[i] * b[i]; break; \
		case FI_LOR: a[i] = (a[i] != 0) || (b[i] != 0); break; \
		case FI_LAND: a[i] = (a[i] != 0) && (b[i] != 0); break; \
		case FI_LXOR: a[i] = (a[i] != 0) != (b[i] != 0); break; \
		case FI_ATOMIC_WRITE: a[i] = b[i]; break; \
		} \
} \
static void fill_##NAME(T *v, int r) \
{ \
	for (int i = 0; i < COUNT; i++) \
		v[i] = (R)((r * 7 + i * 3 + 1) % 3) + (R)((r + i) % 3) * I; \
} \
static int same_##NAME(const T *a, const T *b) \
{ \
	for (int i = 0; i < COUNT; i++) \
		if (!(creal(a[i]) == creal(b[i]) && cimag(a[i]) == cimag(b[i]))) \
			return 0; \
	return 1; \
}

DEFINE_REAL(i8, int8_t, BITOPS_YES)
DEFINE_REAL(u8, uint8_t, BITOPS_YES)
DEFINE_REAL(i16, int16_t, BITOPS_YES)
DEFINE_REAL(u16, uint16_t, BITOPS_YES)
DEFINE_REAL(i32, int32_t, BITOPS_YES)
DEFINE_REAL(u32, uint32_t, BITOPS_YES)
DEFINE_REAL(i64, int64_t, BITOPS_YES)
DEFINE_REAL(u64, uint64_t, BITOPS_YES)
DEFINE_REAL(i128, i128, BITOPS_YES)
DEFINE_REAL(u128, u128, BITOPS_YES)
DEFINE_REAL(f, float, BITOPS_NO)
DEFINE_REAL(d, double, BITOPS_NO)
DEFINE_REAL(ld, long double, BITOPS_NO)
DEFINE_CPLX(fc, float complex, float)
DEFINE_CPLX(dc, double complex, double)
DEFINE_CPLX(ldc, long double complex, long double)

/* The datatypes, with their element sizes and functions. */
struct dtype {
	int dt;
	size_t size;
	void (*fold)(int, void *, const void *);
	void (*fill)(void *, int);
	int (*same)(const void *, const void *);
	int family; /* 0 integer, 1 real, 2 complex */
};

#define DT(ENUM, NAME, T, FAMILY) \
	{ ENUM, sizeof(T), (void (*)(int, void *, const void *))fold_##NAME, \
	  (void (*)(void *, int))fill_##NAME, (int (*)(const void *, const void *))same_##NAME, FAMILY }

static const struct dtype dtypes[] = {
	DT(FI_INT8, i8, int8_t, 0),
	DT(FI_UINT8, u8, uint8_t, 0),
	DT(FI_INT16, i16, int16_t, 0),
	DT(FI_UINT16, u16, uint16_t, 0),
	DT(FI_INT32, i32, int32_t, 0),
	DT(FI_UINT32, u32, uint32_t, 0),
	DT(FI_INT64, i64, int64_t, 0),
	DT(FI_UINT64, u64, uint64_t, 0),
	DT(FI_FLOAT, f, float, 1),
	DT(FI_DOUBLE, d, double, 1),
	DT(FI_FLOAT_COMPLEX, fc, float complex, 2),
	DT(FI_DOUBLE_COMPLEX, dc, double complex, 2),
	DT(FI_LONG_DOUBLE, ld, long double, 1),
	DT(FI_LONG_DOUBLE_COMPLEX, ldc, long double complex, 2),
	DT(FI_INT128, i128, i128, 0),
	DT(FI_UINT128, u128, u128, 0),
};

/* fi_atomic(3)'s rule for which datatypes an operation combines. */
static int combines(int op, int family)
{
	switch (op) {
	case FI_MIN: case FI_MAX: return family != 2;
	case FI_BOR: case FI_BAND: case FI_BXOR: return family == 0;
	case FI_SUM: case FI_PROD: case FI_LOR: case FI_LAND: case FI_LXOR: case FI_ATOMIC_WRITE:
		return 1;
	default: return 0;
	}
}

static void allreduce_matrix(struct node *x, fi_addr_t coll)
{
	static _Alignas(16) unsigned char in[COUNT * 32], out[COUNT * 32], want[COUNT * 32], v[COUNT * 32];
	int ran = 0, right = 0, queried_right = 0, asked = 0;
	for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++) {
		const struct dtype *d = &dtypes[t];
		for (int op = FI_MIN; op <= FI_ATOMIC_WRITE; op++) {
			if (op == FI_ATOMIC_READ)
				continue;
			int ok = combines(op, d->family);
			struct fi_collective_attr attr = { .op = op, .datatype = d->dt };
			int q = fi_query_collective(x->dom, FI_ALLREDUCE, &attr, 0);
			asked++;
			if (ok ? (q == 0 && attr.datatype_attr.size == d->size && attr.datatype_attr.count >= COUNT)
			       : q == -FI_EOPNOTSUPP)
				queried_right++;
			else
				printf("[%d] FAIL query op %d dt %d: %d\n", rank, op, d->dt, q);
			memset(in, 0, sizeof in);
			memset(out, 0, sizeof out);
			d->fill(in, rank);
			ssize_t r = fi_allreduce(x->ep, in, COUNT, NULL, out, NULL, coll, d->dt, op, 0, &ran);
			if (!ok) {
				if (r != -FI_EOPNOTSUPP) {
					printf("[%d] FAIL op %d dt %d refused with %zd\n", rank, op, d->dt, r);
					failures++;
				}
				continue;
			}
			if (r) {
				printf("[%d] FAIL fi_allreduce op %d dt %d: %zd\n", rank, op, d->dt, r);
				continue;
			}
			void *ctx = &ran;
			if (!expect_ok(x, &ctx, 1, "allreduce matrix"))
				continue;
			ran++;
			memset(want, 0, sizeof want);
			d->fill(want, 0);
			for (int p = 1; p < nprocs; p++) {
				memset(v, 0, sizeof v);
				d->fill(v, p);
				d->fold(op, want, v);
			}
			if (d->same(out, want))
				right++;
			else
				printf("[%d] FAIL allreduce op %d dt %d: wrong result\n", rank, op, d->dt);
		}
	}
	char w[128];
	snprintf(w, sizeof w, "fi_query_collective answers every op x datatype (%d of %d)", queried_right, asked);
	RCHECK(w, queried_right == asked);
	snprintf(w, sizeof w, "every supported allreduce op x datatype gives the expected result (%d of %d)", right, ran);
	RCHECK(w, ran > 100 && right == ran);
}

/* ---- the scenarios --------------------------------------------------------- */

static struct fid_av_set *range_set(struct node *x, size_t count, fi_addr_t start, fi_addr_t end, uint64_t stride)
{
	struct fi_av_set_attr a = {
		.count = count, .start_addr = start, .end_addr = end, .stride = stride,
	};
	struct fid_av_set *s = NULL;
	int r = fi_av_set(x->av, &a, &s, NULL);
	if (r) {
		printf("[%d] FAIL fi_av_set(%zu, %lu, %lu, %lu): %d\n", rank, count, (unsigned long)start,
		       (unsigned long)end, (unsigned long)stride, r);
		failures++;
		return NULL;
	}
	return s;
}

/* Sums `rank + 1` over a group with fi_allreduce; returns the sum. */
static uint64_t sum_ranks(struct node *x, fi_addr_t coll)
{
	uint64_t one = rank + 1, sum = 0;
	void *ctx = &sum;
	ssize_t r = fi_allreduce(x->ep, &one, 1, NULL, &sum, NULL, coll, FI_UINT64, FI_SUM, 0, ctx);
	if (r || !expect_ok(x, &ctx, 1, "sum of ranks"))
		return 0;
	return sum;
}

static void bad_input(struct node *x, fi_addr_t coll, struct fid_av_set *strided, fi_addr_t strided_coll)
{
	uint64_t a = 1, b = 0;
	ssize_t r;
	char w[160];

	/* A set of another AV. */
	struct fid_av *av2;
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	RCHECK("second AV", fi_av_open(x->dom, &av_attr, &av2, NULL) == 0);
	fi_addr_t fa;
	RCHECK("second AV insert", fi_av_insert(av2, sh->addr[rank], 1, &fa, 0, NULL) == 1);
	struct fi_av_set_attr sa = { .count = 1, .start_addr = 0, .end_addr = 0, .stride = 1 };
	struct fid_av_set *other;
	RCHECK("a set of the second AV", fi_av_set(av2, &sa, &other, NULL) == 0);
	fi_addr_t oaddr;
	fi_av_set_addr(other, &oaddr);
	struct fid_mc *mc = NULL;
	int j = fi_join_collective(x->ep, oaddr, other, 0, &mc, NULL);
	snprintf(w, sizeof w, "joining a set of another AV is -FI_EINVAL (%d)", j);
	RCHECK(w, j == -FI_EINVAL && mc == NULL);
	j = fi_av_set_union(strided, other);
	snprintf(w, sizeof w, "a union with a set of another AV is -FI_EINVAL (%d)", j);
	RCHECK(w, j == -FI_EINVAL);
	fi_close(&other->fid);
	RCHECK("the second AV closes once its set is closed", fi_close(&av2->fid) == 0);

	r = fi_allreduce(x->ep, &a, 1, NULL, &b, NULL, coll, FI_UINT64, 99, 0, NULL);
	snprintf(w, sizeof w, "an unknown op is -FI_EOPNOTSUPP (%zd)", r);
	RCHECK(w, r == -FI_EOPNOTSUPP);
	r = fi_allreduce(x->ep, &a, 1, NULL, &b, NULL, coll, FI_DOUBLE, FI_BXOR, 0, NULL);
	snprintf(w, sizeof w, "FI_BXOR on FI_DOUBLE is -FI_EOPNOTSUPP (%zd)", r);
	RCHECK(w, r == -FI_EOPNOTSUPP);
	r = fi_allreduce(x->ep, &a, (size_t)1 << 60, NULL, &b, NULL, coll, FI_UINT64, FI_SUM, 0, NULL);
	snprintf(w, sizeof w, "a count too large is -FI_EMSGSIZE (%zd)", r);
	RCHECK(w, r == -FI_EMSGSIZE);
	r = fi_allgather(x->ep, &a, (size_t)1 << 27, NULL, &b, NULL, coll, FI_UINT64, 0, NULL);
	snprintf(w, sizeof w, "an allgather whose result is too large is -FI_EMSGSIZE (%zd)", r);
	RCHECK(w, r == -FI_EMSGSIZE);
	r = fi_barrier(x->ep, 12345, NULL);
	snprintf(w, sizeof w, "a group not joined is -FI_EINVAL (%zd)", r);
	RCHECK(w, r == -FI_EINVAL);
	r = fi_broadcast(x->ep, &a, 1, NULL, coll, 99, FI_UINT64, 0, NULL);
	snprintf(w, sizeof w, "a root not in the AV is -FI_EINVAL (%zd)", r);
	RCHECK(w, r == -FI_EINVAL);
	if (strided_coll != FI_ADDR_NOTAVAIL && nprocs > 1) {
		r = fi_broadcast(x->ep, &a, 1, NULL, strided_coll, 1, FI_UINT64, 0, NULL);
		snprintf(w, sizeof w, "a root outside the group is -FI_EINVAL (%zd)", r);
		RCHECK(w, r == -FI_EINVAL);
	}
	struct fi_collective_attr ca = { .op = FI_NOOP, .datatype = FI_VOID };
	RCHECK("fi_query_collective(FI_BARRIER)", fi_query_collective(x->dom, FI_BARRIER, &ca, 0) == 0 &&
	       ca.max_members >= (size_t)nprocs);
	ca = (struct fi_collective_attr){ .op = FI_NOOP, .datatype = FI_VOID };
	RCHECK("fi_query_collective(FI_BROADCAST) of FI_VOID is -FI_EOPNOTSUPP",
	       fi_query_collective(x->dom, FI_BROADCAST, &ca, 0) == -FI_EOPNOTSUPP);
	ca = (struct fi_collective_attr){ .op = FI_NOOP, .datatype = FI_UINT32 };
	RCHECK("fi_query_collective(FI_ALLGATHER) of FI_UINT32",
	       fi_query_collective(x->dom, FI_ALLGATHER, &ca, 0) == 0 && ca.datatype_attr.size == 4);
}

static int run_all(struct node *x, int matrix)
{
	char w[160];
	int n = nprocs;

	/* AV set attributes as fi_av_set(3) states them. */
	struct fi_av_set_attr bad = { .count = n, .start_addr = FI_ADDR_NOTAVAIL, .end_addr = FI_ADDR_NOTAVAIL, .stride = 1 };
	struct fid_av_set *s = NULL;
	RCHECK("a stride without a range is -FI_EINVAL", fi_av_set(x->av, &bad, &s, NULL) == -FI_EINVAL);
	bad = (struct fi_av_set_attr){ .count = n, .start_addr = 0, .end_addr = FI_ADDR_NOTAVAIL, .stride = 1 };
	RCHECK("a start without an end is -FI_EINVAL", fi_av_set(x->av, &bad, &s, NULL) == -FI_EINVAL);
	bad = (struct fi_av_set_attr){ .count = 1, .start_addr = 0, .end_addr = n - 1, .stride = 1 };
	if (n > 1)
		RCHECK("a range of more than count addresses is -FI_EINVAL", fi_av_set(x->av, &bad, &s, NULL) == -FI_EINVAL);

	/* The universe, joined. */
	struct fid_av_set *all = range_set(x, n, 0, n - 1, 1);
	struct fid_mc *g = join(x, all, "universe");
	if (!g)
		return 1;
	fi_addr_t coll = fi_mc_addr(g);

	/* Barrier, twice, the second through fi_barrier2. */
	void *ctx = &coll;
	RCHECK("fi_barrier", fi_barrier(x->ep, coll, ctx) == 0 && expect_ok(x, &ctx, 1, "barrier"));
	RCHECK("fi_barrier2", fi_barrier2(x->ep, coll, FI_COMPLETION, ctx) == 0 && expect_ok(x, &ctx, 1, "barrier2"));

	/* Broadcast of 4 KiB from every root. */
	static unsigned char buf[4096];
	int bok = 1;
	for (int root = 0; root < n; root++) {
		for (int i = 0; i < 4096; i++)
			buf[i] = rank == root ? (unsigned char)(i * 7 + root) : 0;
		if (fi_broadcast(x->ep, buf, sizeof buf, NULL, coll, root, FI_UINT8, 0, ctx) ||
		    !expect_ok(x, &ctx, 1, "broadcast")) {
			bok = 0;
			continue;
		}
		for (int i = 0; i < 4096; i++)
			bok &= buf[i] == (unsigned char)(i * 7 + root);
	}
	RCHECK("fi_broadcast of 4 KiB from every root", bok);

	/* Allreduce (sum of rank + 1), allgather, alltoall, reduce-scatter. */
	uint64_t s1 = sum_ranks(x, coll);
	snprintf(w, sizeof w, "fi_allreduce sum %lu", (unsigned long)s1);
	RCHECK(w, s1 == (uint64_t)n * (n + 1) / 2);
	int32_t mine[2 * MAXN], gath[2 * MAXN], a2a[2 * MAXN], rs[2];
	for (int i = 0; i < 2 * n; i++)
		mine[i] = 100 * rank + i;
	void *c3[3] = { &mine[0], &gath[0], &rs[0] };
	RCHECK("allgather, alltoall, reduce_scatter posted",
	       fi_allgather(x->ep, mine, 2, NULL, gath, NULL, coll, FI_INT32, 0, c3[0]) == 0 &&
	       fi_alltoall(x->ep, mine, 2, NULL, a2a, NULL, coll, FI_INT32, 0, c3[1]) == 0 &&
	       fi_reduce_scatter(x->ep, mine, 2, NULL, rs, NULL, coll, FI_INT32, FI_SUM, 0, c3[2]) == 0);
	if (expect_ok(x, c3, 3, "allgather, alltoall, reduce_scatter")) {
		int okg = 1, oka = 1;
		for (int j = 0; j < n; j++)
			for (int k = 0; k < 2; k++) {
				okg &= gath[2 * j + k] == 100 * j + k;
				oka &= a2a[2 * j + k] == 100 * j + 2 * rank + k;
			}
		RCHECK("fi_allgather in rank order", okg);
		RCHECK("fi_alltoall", oka);
		int32_t want0 = 0, want1 = 0;
		for (int j = 0; j < n; j++) {
			want0 += 100 * j + 2 * rank;
			want1 += 100 * j + 2 * rank + 1;
		}
		RCHECK("fi_reduce_scatter", rs[0] == want0 && rs[1] == want1);
	}

	/* Reduce, scatter and gather to / from the last rank and rank 0. */
	for (int root = n - 1; root >= 0; root -= (n - 1 > 0 ? n - 1 : 1)) {
		int64_t one[2] = { rank, -rank }, red[2] = { 0, 0 }, sc[2] = { 0, 0 }, ga[2 * MAXN];
		int64_t src[2 * MAXN];
		for (int i = 0; i < 2 * n; i++)
			src[i] = 1000 * root + i;
		void *c[3] = { &red, &sc, &ga };
		RCHECK("reduce, scatter, gather posted",
		       fi_reduce(x->ep, one, 2, NULL, red, NULL, coll, root, FI_INT64, FI_SUM, 0, c[0]) == 0 &&
		       fi_scatter(x->ep, src, 2, NULL, sc, NULL, coll, root, FI_INT64, 0, c[1]) == 0 &&
		       fi_gather(x->ep, one, 2, NULL, ga, NULL, coll, root, FI_INT64, 0, c[2]) == 0);
		if (expect_ok(x, c, 3, "reduce, scatter, gather")) {
			int64_t sum = (int64_t)n * (n - 1) / 2;
			if (rank == root) {
				RCHECK("fi_reduce at the root", red[0] == sum && red[1] == -sum);
				int okg = 1;
				for (int j = 0; j < n; j++)
					okg &= ga[2 * j] == j && ga[2 * j + 1] == -j;
				RCHECK("fi_gather at the root", okg);
			}
			RCHECK("fi_scatter", sc[0] == 1000 * root + 2 * rank && sc[1] == 1000 * root + 2 * rank + 1);
		}
		if (root == 0)
			break;
	}

	/* fi_collectivemsg: an allreduce. */
	{
		uint64_t one = 2, out = 0;
		struct fi_ioc iov = { .addr = &one, .count = 1 }, res = { .addr = &out, .count = 1 };
		struct fi_msg_collective m = {
			.msg_iov = &iov, .iov_count = 1, .coll_addr = coll, .coll = FI_ALLREDUCE,
			.datatype = FI_UINT64, .op = FI_SUM, .context = &out,
		};
		void *c = &out;
		RCHECK("fi_collectivemsg", x->ep->collective->msg(x->ep, &m, &res, NULL, 1, 0) == 0 &&
		       expect_ok(x, &c, 1, "collectivemsg") && out == 2 * (uint64_t)n);
	}

	/* A strided subset: the even ranks. */
	struct fid_av_set *strided = range_set(x, (n + 1) / 2, 0, n - 1, 2);
	fi_addr_t strided_coll = FI_ADDR_NOTAVAIL;
	struct fid_mc *gs = NULL;
	if (even(rank)) {
		gs = join(x, strided, "strided subset");
		if (gs) {
			strided_coll = fi_mc_addr(gs);
			uint64_t want = 0;
			for (int j = 0; j < n; j += 2)
				want += j + 1;
			uint64_t got = sum_ranks(x, strided_coll);
			snprintf(w, sizeof w, "allreduce over the even ranks: %lu of %lu", (unsigned long)got,
				 (unsigned long)want);
			RCHECK(w, got == want);
		}
	} else {
		fi_addr_t sa;
		fi_av_set_addr(strided, &sa);
		struct fid_mc *no = NULL;
		int r = fi_join_collective(x->ep, sa, strided, 0, &no, NULL);
		snprintf(w, sizeof w, "a rank outside the set cannot join it (%d)", r);
		RCHECK(w, r == -FI_EINVAL);
	}

	/* A union of two sets: the lower half and the upper half. */
	int half = n / 2;
	struct fid_av_set *lo = half > 0 ? range_set(x, half, 0, half - 1, 1) :
		range_set(x, 0, FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL, 0);
	struct fid_av_set *hi = range_set(x, n - half, half, n - 1, 1);
	RCHECK("fi_av_set_union", fi_av_set_union(lo, hi) == 0);
	struct fid_mc *gu = join(x, lo, "union of two sets");
	fi_addr_t ucoll = gu ? fi_mc_addr(gu) : FI_ADDR_NOTAVAIL;

	/* Set operations that do not join. */
	struct fid_av_set *odd = range_set(x, n, 0, n - 1, 1);
	RCHECK("fi_av_set_diff", fi_av_set_diff(odd, strided) == 0);
	RCHECK("fi_av_set_intersect with itself", fi_av_set_intersect(odd, odd) == 0);
	RCHECK("fi_av_set_insert of an address not in the AV is -FI_EINVAL", fi_av_set_insert(odd, 1000) == -FI_EINVAL);
	RCHECK("fi_av_set_insert of a member is -FI_EINVAL", n < 2 || fi_av_set_insert(odd, 1) == -FI_EINVAL);
	RCHECK("fi_av_set_remove of a non-member is -FI_EINVAL", fi_av_set_remove(odd, 0) == -FI_EINVAL);
	RCHECK("fi_av_set_insert, then fi_av_set_remove", fi_av_set_insert(odd, 0) == 0 && fi_av_set_remove(odd, 0) == 0);
	fi_close(&odd->fid);

	/* Two groups at once on one endpoint: allreduces and barriers of the
	 * universe and of the union posted before any completes. */
	if (gu) {
		uint64_t one = rank + 1, two = 2 * (rank + 1), s_all = 0, s_union = 0;
		void *c[4] = { &s_all, &s_union, &one, &two };
		RCHECK("two groups' collectives posted at once",
		       fi_allreduce(x->ep, &one, 1, NULL, &s_all, NULL, coll, FI_UINT64, FI_SUM, 0, c[0]) == 0 &&
		       fi_allreduce(x->ep, &two, 1, NULL, &s_union, NULL, ucoll, FI_UINT64, FI_SUM, 0, c[1]) == 0 &&
		       fi_barrier(x->ep, ucoll, c[2]) == 0 && fi_barrier(x->ep, coll, c[3]) == 0);
		if (expect_ok(x, c, 4, "two groups")) {
			uint64_t t = (uint64_t)n * (n + 1) / 2;
			RCHECK("two groups' results", s_all == t && s_union == 2 * t);
		}
	}

	bad_input(x, coll, strided, strided_coll);

	if (matrix)
		allreduce_matrix(x, coll);

	/* Everyone done before anyone leaves. */
	RCHECK("final barrier", fi_barrier(x->ep, coll, ctx) == 0 && expect_ok(x, &ctx, 1, "final barrier"));
	meet(2, 0);
	if (gs)
		RCHECK("close the strided group", fi_close(&gs->fid) == 0);
	if (gu)
		RCHECK("close the union group", fi_close(&gu->fid) == 0);
	RCHECK("close the universe group", fi_close(&g->fid) == 0);
	RCHECK("a closed group is gone", fi_barrier(x->ep, coll, ctx) == -FI_EINVAL);
	fi_close(&lo->fid);
	fi_close(&hi->fid);
	fi_close(&strided->fid);
	RCHECK("close the universe set", fi_close(&all->fid) == 0);
	return 0;
}

static int run_kill(struct node *x, int mid)
{
	char w[160];
	struct fid_av_set *all = range_set(x, nprocs, 0, nprocs - 1, 1);
	struct fid_mc *g = join(x, all, "universe");
	if (!g)
		return 1;
	fi_addr_t coll = fi_mc_addr(g);
	void *ctx = &coll;
	RCHECK("barrier before the kill", fi_barrier(x->ep, coll, ctx) == 0 && expect_ok(x, &ctx, 1, "barrier"));
	meet(3, 0);
	/* Mid-collective: a 256 KiB allreduce (frames, several steps); the
	 * last rank drives its side a few times and dies before it is done.
	 * The others' allreduce completes (if the victim's frames were all
	 * out) with the right sums, or fails; it never hangs. */
	if (!mid && rank == nprocs - 1) {
		/* Between collectives: the others' next ones wait for a member
		 * that never comes (on shm's board: no frame fails). */
		fflush(stdout);
		kill(getpid(), SIGKILL);
	}
	enum { BIG = 32768 };
	static uint64_t big_in[BIG], big_out[BIG];
	for (int i = 0; i < BIG; i++)
		big_in[i] = (uint64_t)rank * BIG + i;
	void *cb = big_in;
	if (mid)
		RCHECK("a large allreduce posted",
		       fi_allreduce(x->ep, big_in, BIG, NULL, big_out, NULL, coll, FI_UINT64, FI_SUM, 0, cb) == 0);
	if (rank == nprocs - 1) {
		struct fi_cq_tagged_entry e;
		for (int i = 0; i < 3; i++)
			(void)fi_cq_read(x->cq, &e, 1);
		fflush(stdout);
		kill(getpid(), SIGKILL);
	}
	if (mid) {
		struct done d1;
		int got1 = wait_n(x, &d1, 1, WAIT_S);
		int right = 1;
		for (int i = 0; got1 == 1 && d1.err == 0 && i < BIG; i++)
			right &= big_out[i] == (uint64_t)BIG * nprocs * (nprocs - 1) / 2 + (uint64_t)nprocs * i;
		snprintf(w, sizeof w, "the large allreduce the victim died in ends within %.0f s (%d, err %d)", WAIT_S,
			 got1, got1 == 1 ? d1.err : 0);
		RCHECK(w, got1 == 1 && d1.ctx == cb && (d1.err != 0 || right));
	}
	/* The next barrier and allreduce: each refused at once (the group
	 * knows the member is gone) or failed by an error entry. */
	uint64_t one = 1, sum = 0;
	void *c[2] = { &one, &sum };
	double t0 = now_s();
	ssize_t rb = fi_barrier(x->ep, coll, c[0]);
	ssize_t ra = fi_allreduce(x->ep, &one, 1, NULL, &sum, NULL, coll, FI_UINT64, FI_SUM, 0, c[1]);
	snprintf(w, sizeof w, "barrier and allreduce with a member gone: posted or refused (%zd, %zd)", rb, ra);
	RCHECK(w, (rb == 0 || rb < 0) && (ra == 0 || ra < 0) && rb != -FI_EAGAIN && ra != -FI_EAGAIN);
	int want = (rb == 0) + (ra == 0);
	struct done d[2];
	int got = want ? wait_n(x, d, want, WAIT_S) : 0;
	double took = now_s() - t0;
	snprintf(w, sizeof w, "those posted fail with an error entry within %.0f s (%d of %d in %.2f s)", WAIT_S, got,
		 want, took);
	RCHECK(w, got == want && (got < 1 || d[0].err != 0) && (got < 2 || d[1].err != 0));
	for (int i = 0; i < got; i++)
		printf("[%d] error %d (%s) for ctx %p\n", rank, d[i].err, fi_strerror(d[i].err), d[i].ctx);
	ssize_t r = fi_barrier(x->ep, coll, ctx);
	snprintf(w, sizeof w, "the group refuses new operations (%zd)", r);
	RCHECK(w, r < 0 || (wait_n(x, d, 1, WAIT_S) == 1 && d[0].err != 0));
	meet(4, 1);
	fi_close(&g->fid);
	fi_close(&all->fid);
	return 0;
}

/* A broadcast's root far ahead: rank 0 posts AHEAD broadcasts of 4 KiB
 * and completes them all before the others start theirs. Past what a
 * group holds for operations not started (FI_COLL_HELD_BYTES, small in
 * this scenario) the others take no more frames and the root's wait with
 * the providers; every broadcast arrives, in order, and the group stays
 * usable. */
static int run_ahead(struct node *x)
{
	enum { AHEAD = 64 };
	static unsigned char bufs[AHEAD][4096];
	struct fid_av_set *all = range_set(x, nprocs, 0, nprocs - 1, 1);
	struct fid_mc *g = join(x, all, "universe");
	if (!g)
		return 1;
	fi_addr_t coll = fi_mc_addr(g);
	void *ctx = &coll;
	int ok = 1;
	if (rank == 0) {
		for (int k = 0; k < AHEAD; k++) {
			memset(bufs[k], k + 1, sizeof bufs[k]);
			if (fi_broadcast(x->ep, bufs[k], sizeof bufs[k], NULL, coll, 0, FI_UINT8, 0, ctx) ||
			    !expect_ok(x, &ctx, 1, "the root's broadcast"))
				ok = 0;
		}
		RCHECK("the root completes its broadcasts before the others start", ok);
	}
	meet(5, 0);
	if (rank != 0) {
		for (int k = 0; k < AHEAD; k++) {
			if (fi_broadcast(x->ep, bufs[k], sizeof bufs[k], NULL, coll, 0, FI_UINT8, 0, ctx) ||
			    !expect_ok(x, &ctx, 1, "a broadcast from a root far ahead")) {
				ok = 0;
				continue;
			}
			for (size_t i = 0; i < sizeof bufs[k]; i++)
				ok &= bufs[k][i] == k + 1;
		}
		RCHECK("every broadcast of a root far ahead arrives, in order", ok);
	}
	uint64_t s = sum_ranks(x, coll);
	RCHECK("the group stays usable", s == (uint64_t)nprocs * (nprocs + 1) / 2);
	meet(6, 0);
	fi_close(&g->fid);
	fi_close(&all->fid);
	return 0;
}

static int child(const char *prov, const char *scenario)
{
	struct node x;
	int r = node_open(&x, prov);
	char w[128];
	snprintf(w, sizeof w, "open an RDM endpoint of %s with FI_COLLECTIVE (%d)", prov, r);
	RCHECK(w, r == 0);
	if (r)
		return 1;
	RCHECK("the offer has FI_COLLECTIVE", x.info->caps & FI_COLLECTIVE);
	sh->len[rank] = sizeof sh->addr[rank];
	RCHECK("fi_getname", fi_getname(&x.ep->fid, sh->addr[rank], &sh->len[rank]) == 0);
	meet(0, 0);
	fi_addr_t fa[MAXN];
	int inserted = 0;
	for (int i = 0; i < nprocs; i++)
		inserted += fi_av_insert(x.av, sh->addr[i], 1, &fa[i], 0, NULL) == 1 && fa[i] == (fi_addr_t)i;
	RCHECK("every address inserted at its rank", inserted == nprocs);
	meet(1, 0);
	if (!strcmp(scenario, "kill") || !strcmp(scenario, "killmid"))
		r = run_kill(&x, !strcmp(scenario, "killmid"));
	else if (!strcmp(scenario, "ahead"))
		r = run_ahead(&x);
	else
		r = run_all(&x, !strcmp(scenario, "all"));
	node_close(&x);
	return r || failures;
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "shm";
	nprocs = argc > 2 ? atoi(argv[2]) : 2;
	const char *scenario = argc > 3 ? argv[3] : "basic";
	pid_t pids[MAXN];

	start();
	if (nprocs < 1 || nprocs > MAXN)
		return 2;
	sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 2;
	memset(sh, 0, sizeof *sh);
	for (int i = 0; i < nprocs; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			rank = i;
			int rc = child(prov, scenario);
			fflush(stdout);
			_exit(rc ? 1 : 0);
		}
	}
	double end = now_s() + 150;
	int left = nprocs, status[MAXN];
	int alive[MAXN];
	for (int i = 0; i < nprocs; i++)
		alive[i] = 1;
	while (left && now_s() < end) {
		for (int i = 0; i < nprocs; i++)
			if (alive[i] && waitpid(pids[i], &status[i], WNOHANG) == pids[i]) {
				alive[i] = 0;
				left--;
			}
		usleep(10000);
	}
	rank = -1;
	for (int i = 0; i < nprocs; i++)
		if (alive[i]) {
			kill(pids[i], SIGKILL);
			waitpid(pids[i], &status[i], 0);
			printf("FAIL rank %d did not finish in time\n", i);
			failures++;
			status[i] = -1;
		}
	for (int i = 0; i < nprocs; i++) {
		int killed = !strncmp(scenario, "kill", 4) && i == nprocs - 1;
		char w[64];
		snprintf(w, sizeof w, "rank %d %s", i, killed ? "killed" : "passed");
		if (killed)
			CHECK(w, status[i] != -1 && WIFSIGNALED(status[i]) && WTERMSIG(status[i]) == SIGKILL);
		else
			CHECK(w, status[i] != -1 && WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0);
	}
	return finish();
}
