/* Shared by the client tests that run both on Debian's libfabric 1.17 and on
 * ofi's libfabric.so.1 (tests/agree.rs): checks, comparison lines and a
 * loopback RDM endpoint.
 *
 * - CHECK(what, cond): "ok what" or "FAIL what"; a failure fails the run.
 * - CHECK_OFI(what, cond): a check of the man page's behaviour that
 *   libfabric 1.17 does not meet (the call site says how it differs); it is
 *   asserted on ofi and only printed as "skip" on libfabric.
 * - SAME(fmt, ...): a "= ..." line; both libraries must print the same
 *   sequence of these lines (return codes, attributes that matter).
 * - finish(): the last line ("ALL OK" or "FAILED n") and the exit status.
 *
 * OFI_CLIENT_LIB=ofi in the environment marks a run on ofi's library. */
#ifndef OFI_CLIENT_COMMON_H
#define OFI_CLIENT_COMMON_H

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

static int failures;
static int on_ofi;

#define CHECK(what, cond) do { \
	if (cond) printf("ok %s\n", what); \
	else { printf("FAIL %s (line %d)\n", what, __LINE__); failures++; } \
} while (0)

#define CHECK_OFI(what, cond) do { \
	if (!on_ofi) printf("skip on libfabric: %s\n", what); \
	else CHECK(what, cond); \
} while (0)

#define SAME(...) do { printf("= "); printf(__VA_ARGS__); printf("\n"); } while (0)

static inline void start(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *lib = getenv("OFI_CLIENT_LIB");
	on_ofi = lib && !strcmp(lib, "ofi");
	/* Which libfabric.so.1 the loader picked (the harness checks it). */
	FILE *maps = fopen("/proc/self/maps", "r");
	char line[1024];
	while (maps && fgets(line, sizeof line, maps)) {
		char *path = strchr(line, '/');
		if (path && strstr(path, "libfabric.so")) {
			printf("lib: %s", path);
			break;
		}
	}
	if (maps)
		fclose(maps);
}

static inline int finish(void)
{
	if (failures)
		printf("FAILED %d\n", failures);
	else
		printf("ALL OK\n");
	return failures != 0;
}

/* Whether fd is readable now (poll with a zero timeout). */
static inline int readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static inline double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* A loopback RDM endpoint of one provider: fabric, domain, AV (its own
 * address inserted as `self`), one CQ for both directions. */
struct loop {
	struct fi_info *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	fi_addr_t self;
};

/* Opens a loopback endpoint of `prov` ("tcp" or "shm") with `caps`; the
 * CQ is opened with `cq_attr` (NULL: context format, no wait object).
 * Returns 0 or the first failing call's return value. */
static inline int loop_open(struct loop *l, const char *prov, uint64_t caps, struct fi_cq_attr *cq_attr)
{
	struct fi_info *hints = fi_allocinfo();
	int r;

	memset(l, 0, sizeof *l);
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = caps;
	hints->mode = 0;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &l->info);
	fi_freeinfo(hints);
	if (r)
		return r;
	if ((r = fi_fabric(l->info->fabric_attr, &l->fab, NULL)))
		return r;
	if ((r = fi_domain(l->fab, l->info, &l->dom, NULL)))
		return r;
	struct fi_av_attr av_attr = { .type = FI_AV_UNSPEC };
	if ((r = fi_av_open(l->dom, &av_attr, &l->av, NULL)))
		return r;
	struct fi_cq_attr plain = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE };
	/* The CQ's context is the loop (what a poll set reports). */
	if ((r = fi_cq_open(l->dom, cq_attr ? cq_attr : &plain, &l->cq, l)))
		return r;
	if ((r = fi_endpoint(l->dom, l->info, &l->ep, NULL)))
		return r;
	if ((r = fi_ep_bind(l->ep, &l->av->fid, 0)))
		return r;
	if ((r = fi_ep_bind(l->ep, &l->cq->fid, FI_TRANSMIT | FI_RECV)))
		return r;
	if ((r = fi_enable(l->ep)))
		return r;
	char name[256];
	size_t len = sizeof name;
	if ((r = fi_getname(&l->ep->fid, name, &len)))
		return r;
	r = fi_av_insert(l->av, name, 1, &l->self, 0, NULL);
	return r == 1 ? 0 : (r < 0 ? r : -FI_EOTHER);
}

static inline void loop_close(struct loop *l)
{
	if (l->ep)
		fi_close(&l->ep->fid);
	if (l->cq)
		fi_close(&l->cq->fid);
	if (l->av)
		fi_close(&l->av->fid);
	if (l->dom)
		fi_close(&l->dom->fid);
	if (l->fab)
		fi_close(&l->fab->fid);
	if (l->info)
		fi_freeinfo(l->info);
	memset(l, 0, sizeof *l);
}

/* Retries a data-transfer call while it returns -FI_EAGAIN (at most 10 s),
 * driving progress with fi_cq_read(cq, NULL, 0) in between. */
#define RETRY(l, call) ({ \
	ssize_t _r; double _end = now_s() + 10; \
	while ((_r = (call)) == -FI_EAGAIN && now_s() < _end) \
		fi_cq_read((l)->cq, NULL, 0); \
	_r; })

/* Reads `n` completions from the loop's CQ (format context) within 10 s;
 * returns how many were read, or a negative error other than -FI_EAGAIN. */
static inline int loop_complete(struct loop *l, int n)
{
	struct fi_cq_entry e[8];
	int got = 0;
	double end = now_s() + 10;
	while (got < n && now_s() < end) {
		ssize_t r = fi_cq_read(l->cq, e, n - got < 8 ? n - got : 8);
		if (r > 0)
			got += (int)r;
		else if (r != -FI_EAGAIN)
			return (int)r;
	}
	return got;
}

#endif
