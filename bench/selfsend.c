/*
 * selfsend.c: the software cost of one operation through a libfabric
 * library, without a second process: an RDM endpoint sends to itself,
 * ITERS times. Under callgrind the difference between two iteration
 * counts, divided by their difference, is the instructions one operation
 * costs on its whole path (C ABI, provider, completion queue): a figure the
 * machine's load does not move (bench/instructions.sh does the arithmetic).
 *
 * Operations (the third argument):
 *   inject  (default) 8 bytes by fi_tinject, taken by a posted fi_trecv,
 *           the receive's completion read with fi_cq_read (injects complete
 *           silently: the transmit side is bound with FI_SELECTIVE_COMPLETION)
 *   send4k  4 KiB by fi_tsend into a posted fi_trecv, both completions read
 *   write8  8 bytes by fi_write into a region the endpoint registered
 *           itself, its completion read
 *
 * Usage: selfsend ITERS [PROVIDER [OP]]
 * Prints: "<provider> <iters> <op> ok", or an error naming the failed call.
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                      \
	do {                                                                 \
		int rc_ = (call);                                                \
		if (rc_) {                                                       \
			fprintf(stderr, "%s: %s\n", #call, fi_strerror(-rc_));      \
			exit(1);                                                     \
		}                                                                \
	} while (0)

enum op { OP_INJECT, OP_SEND4K, OP_WRITE8 };

static struct fid_cq *cq;
static struct fi_cq_tagged_entry done[16];

/* Reads completions until `want` arrived; returns how many came. */
static int reap(int want)
{
	int got = 0;
	while (got < want) {
		ssize_t r = fi_cq_read(cq, done + got, 16 - got);
		if (r == -FI_EAGAIN)
			continue;
		if (r < 0) {
			struct fi_cq_err_entry e = { 0 };
			fi_cq_readerr(cq, &e, 0);
			fprintf(stderr, "fi_cq_read: %s (%s)\n", fi_strerror((int)-r),
				fi_strerror(e.err));
			exit(1);
		}
		got += (int)r;
	}
	return got;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 1000;
	const char *opname = argc > 3 ? argv[3] : "inject";
	enum op op;
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_ep *ep;
	struct fid_mr *mr = NULL;
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .size = 128 };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	struct fi_context ctx, ctx2;
	static char out[4096], in[4096], region[4096];
	char name[256];
	size_t len = sizeof name, size;
	void *desc = NULL;
	uint64_t key = 0, raddr = 0;
	fi_addr_t self;

	if (!strcmp(opname, "inject"))
		op = OP_INJECT;
	else if (!strcmp(opname, "send4k"))
		op = OP_SEND4K;
	else if (!strcmp(opname, "write8"))
		op = OP_WRITE8;
	else {
		fprintf(stderr, "unknown operation %s (inject, send4k, write8)\n", opname);
		return 2;
	}
	size = op == OP_SEND4K ? 4096 : 8;
	memset(out, 'x', sizeof out);

	hints->caps = FI_TAGGED | (op == OP_WRITE8 ? FI_RMA : 0);
	hints->ep_attr->type = FI_EP_RDM;
	hints->mode = FI_CONTEXT;
	/* Every registration mode an application can follow here. */
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	if (argc > 2)
		hints->fabric_attr->prov_name = strdup(argv[2]);
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_av_open(domain, &av_attr, &av, NULL));
	CHECK(fi_endpoint(domain, info, &ep, NULL));
	/* Injects complete silently; everything else completes in the CQ. */
	CHECK(fi_ep_bind(ep, &cq->fid,
			 FI_TRANSMIT | (op == OP_INJECT ? FI_SELECTIVE_COMPLETION : 0)));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_RECV));
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	if (op != OP_INJECT) {
		uint64_t access = op == OP_WRITE8 ? FI_WRITE | FI_REMOTE_WRITE : FI_SEND | FI_RECV;
		void *base = op == OP_WRITE8 ? (void *)region : (void *)out;
		CHECK(fi_mr_reg(domain, base, sizeof region, access, 0, 1, 0, &mr, NULL));
		if (info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
			CHECK(fi_mr_bind(mr, &ep->fid, 0));
			CHECK(fi_mr_enable(mr));
		}
		desc = fi_mr_desc(mr);
		key = fi_mr_key(mr);
		raddr = info->domain_attr->mr_mode & FI_MR_VIRT_ADDR ? (uint64_t)(uintptr_t)region : 0;
	}
	CHECK(fi_enable(ep));
	CHECK(fi_getname(&ep->fid, name, &len));
	if (fi_av_insert(av, name, 1, &self, 0, NULL) != 1) {
		fprintf(stderr, "fi_av_insert of its own address failed\n");
		return 1;
	}
	for (int i = 0; i < iters; i++) {
		ssize_t r;
		out[0] = (char)i;
		if (op == OP_WRITE8) {
			while ((r = fi_write(ep, out, size, desc, self, raddr, key, &ctx)) == -FI_EAGAIN)
				fi_cq_read(cq, done, 0);
			if (r) {
				fprintf(stderr, "fi_write: %s\n", fi_strerror((int)-r));
				return 1;
			}
			if (reap(1) != 1 || done[0].op_context != &ctx || region[0] != (char)i) {
				fprintf(stderr, "iteration %d: the write did not land\n", i);
				return 1;
			}
			continue;
		}
		while ((r = fi_trecv(ep, in, size, NULL, FI_ADDR_UNSPEC, 7, 0, &ctx)) == -FI_EAGAIN)
			fi_cq_read(cq, done, 0);
		if (r) {
			fprintf(stderr, "fi_trecv: %s\n", fi_strerror((int)-r));
			return 1;
		}
		if (op == OP_INJECT) {
			while ((r = fi_tinject(ep, out, size, self, 7)) == -FI_EAGAIN)
				fi_cq_read(cq, done, 0);
		} else {
			while ((r = fi_tsend(ep, out, size, desc, self, 7, &ctx2)) == -FI_EAGAIN)
				fi_cq_read(cq, done, 0);
		}
		if (r) {
			fprintf(stderr, "%s: %s\n", op == OP_INJECT ? "fi_tinject" : "fi_tsend",
				fi_strerror((int)-r));
			return 1;
		}
		int want = op == OP_INJECT ? 1 : 2, got = reap(want), seen = 0;
		for (int k = 0; k < got; k++)
			seen |= done[k].op_context == &ctx ? 1 : done[k].op_context == &ctx2 ? 2 : 4;
		if (got != want || seen != (op == OP_INJECT ? 1 : 3) || memcmp(in, out, size)) {
			fprintf(stderr, "iteration %d: fi_cq_read gave %d completions\n", i, got);
			return 1;
		}
	}
	printf("%s %d %s ok\n", info->fabric_attr->prov_name, iters, opname);
	if (mr)
		fi_close(&mr->fid);
	fi_close(&ep->fid);
	fi_close(&av->fid);
	fi_close(&cq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}
