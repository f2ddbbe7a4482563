/*
 * selfsend.c: the software cost of one small tagged message through a
 * libfabric library, without a second process: an RDM endpoint sends 8
 * bytes to itself with fi_tinject and takes them with a posted fi_trecv,
 * reading the completion with fi_cq_read, ITERS times. Under callgrind the
 * difference between two iteration counts, divided by their difference, is
 * the instructions one message costs on its whole path (C ABI, provider,
 * completion queue): a figure the machine's load does not move
 * (bench/instructions.sh does the arithmetic).
 *
 * Usage: selfsend ITERS [PROVIDER]
 * Prints: "<provider> <iters> ok", or an error naming the failed call.
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
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

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 1000;
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_ep *ep;
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .size = 128 };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	struct fi_cq_tagged_entry done[16];
	struct fi_context ctx;
	char name[256], out[8] = "payload", in[8];
	size_t len = sizeof name;
	fi_addr_t self;

	hints->caps = FI_TAGGED;
	hints->ep_attr->type = FI_EP_RDM;
	hints->mode = FI_CONTEXT;
	if (argc > 2)
		hints->fabric_attr->prov_name = strdup(argv[2]);
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_av_open(domain, &av_attr, &av, NULL));
	CHECK(fi_endpoint(domain, info, &ep, NULL));
	/* Injects complete silently; receives complete in the CQ. */
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_SELECTIVE_COMPLETION));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_RECV));
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	CHECK(fi_enable(ep));
	CHECK(fi_getname(&ep->fid, name, &len));
	if (fi_av_insert(av, name, 1, &self, 0, NULL) != 1) {
		fprintf(stderr, "fi_av_insert of its own address failed\n");
		return 1;
	}
	for (int i = 0; i < iters; i++) {
		ssize_t r;
		while ((r = fi_trecv(ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, 7, 0, &ctx)) == -FI_EAGAIN)
			fi_cq_read(cq, done, 0);
		if (r) {
			fprintf(stderr, "fi_trecv: %s\n", fi_strerror((int)-r));
			return 1;
		}
		while ((r = fi_tinject(ep, out, sizeof out, self, 7)) == -FI_EAGAIN)
			fi_cq_read(cq, done, 0);
		if (r) {
			fprintf(stderr, "fi_tinject: %s\n", fi_strerror((int)-r));
			return 1;
		}
		while ((r = fi_cq_read(cq, done, 16)) == -FI_EAGAIN)
			;
		if (r != 1 || done[0].op_context != &ctx || memcmp(in, out, sizeof in)) {
			fprintf(stderr, "iteration %d: fi_cq_read gave %zd\n", i, r);
			return 1;
		}
	}
	printf("%s %d ok\n", info->fabric_attr->prov_name, iters);
	fi_close(&ep->fid);
	fi_close(&av->fid);
	fi_close(&cq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}
