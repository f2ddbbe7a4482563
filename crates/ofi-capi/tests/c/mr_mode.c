/* Item 4 of issue 16: memory-registration modes as the hints state them.
 * FI_MR_BASIC and FI_MR_SCALABLE are kept as given (fi_mr(3)), an old API
 * (before 1.5) answers the old way, an offer never requires modes the
 * hints did not allow (fi_domain(3)), and every failure is a negative
 * fi_errno. A domain opened with an old mode works by it: FI_MR_BASIC
 * addresses by virtual address with provider keys, FI_MR_SCALABLE by
 * offset with the application's keys. Usage: mr_mode PROV TYPE. */
#include "common.h"

static const char *prov;
static enum fi_ep_type type;

/* getinfo for prov/type with `mr_mode` at API `version`: its return value,
 * and in *mode the offers' common mr_mode (-1 if they differ). */
static int ask(uint32_t version, int mr_mode, int *mode, int *allowed_only)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = type;
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = mr_mode;
	int r = fi_getinfo(version, NULL, NULL, 0, hints, &info);
	fi_freeinfo(hints);
	*mode = -2;
	*allowed_only = 1;
	for (struct fi_info *i = r ? NULL : info; i; i = i->next) {
		int m = i->domain_attr->mr_mode;
		*mode = *mode == -2 || *mode == m ? m : -1;
		if (m & ~mr_mode)
			*allowed_only = 0;
	}
	if (!r)
		fi_freeinfo(info);
	CHECK("getinfo never answers a positive value", r <= 0);
	return r;
}

/* One RMA write to itself on a domain opened with `mr_mode`: with
 * FI_MR_SCALABLE the requested key and offset 0; with FI_MR_BASIC the
 * provider's key and the virtual address. */
static void write_by(int mr_mode)
{
	struct loop l;
	struct fi_info *hints = fi_allocinfo();
	int r;
	memset(&l, 0, sizeof l);
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = mr_mode;
	r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &l.info);
	fi_freeinfo(hints);
	CHECK("an RDM offer for the old mode", r == 0);
	if (r)
		return;
	struct fi_av_attr av_attr = { .type = FI_AV_UNSPEC };
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT };
	r = fi_fabric(l.info->fabric_attr, &l.fab, NULL) || fi_domain(l.fab, l.info, &l.dom, NULL) ||
	    fi_av_open(l.dom, &av_attr, &l.av, NULL) || fi_cq_open(l.dom, &cq_attr, &l.cq, NULL) ||
	    fi_endpoint(l.dom, l.info, &l.ep, NULL) || fi_ep_bind(l.ep, &l.av->fid, 0) ||
	    fi_ep_bind(l.ep, &l.cq->fid, FI_TRANSMIT | FI_RECV) || fi_enable(l.ep);
	CHECK("endpoint", r == 0);
	char name[64];
	size_t len = sizeof name;
	CHECK("self in the AV", !fi_getname(&l.ep->fid, name, &len) &&
	      fi_av_insert(l.av, name, 1, &l.self, 0, NULL) == 1);
	static char target[64], source[64] = "by the old mode";
	struct fid_mr *mr;
	uint64_t want_key = 0x2a;
	r = fi_mr_reg(l.dom, target, sizeof target, FI_REMOTE_WRITE, 0, want_key, 0, &mr, NULL);
	CHECK("register", r == 0);
	if (r)
		return;
	uint64_t key = fi_mr_key(mr);
	uint64_t addr = mr_mode == FI_MR_BASIC ? (uint64_t)(uintptr_t)target : 0;
	if (mr_mode == FI_MR_SCALABLE)
		CHECK("FI_MR_SCALABLE: the key asked for", key == want_key);
	memset(target, 0, sizeof target);
	r = RETRY(&l, fi_write(l.ep, source, sizeof source, NULL, l.self, addr, key, NULL));
	CHECK("write posted", r == 0);
	CHECK("write completes where the old mode says", loop_complete(&l, 1) == 1 && !strcmp(target, source));
	fi_close(&mr->fid);
	loop_close(&l);
}

/* fi_mr_regattr without FI_HMEM asked for: iface and what follows are
 * not read (fi_mr(3)), so leaving them unset registers host memory (ofi
 * refused a non-zero iface with -FI_EOPNOTSUPP). */
static void regattr_ignores_iface(void)
{
	struct loop l;
	int r = loop_open(&l, prov, FI_MSG | FI_RMA, NULL);
	CHECK("loop endpoint for regattr", r == 0);
	if (r)
		return;
	static char buf[64];
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof buf };
	struct fi_mr_attr a;
	memset(&a, 0x5a, sizeof a);
	a.mr_iov = &iov;
	a.iov_count = 1;
	a.access = FI_REMOTE_WRITE | FI_REMOTE_READ;
	a.offset = 0;
	a.requested_key = 7;
	a.context = NULL;
	a.auth_key_size = 0;
	a.auth_key = NULL;
	struct fid_mr *mr = NULL;
	/* libfabric 1.17 crashes here (SIGSEGV: it reads the rest). */
	CHECK_OFI("regattr with iface and what follows unset registers host memory",
		  on_ofi && fi_mr_regattr(l.dom, &a, 0, &mr) == 0);
	if (mr)
		fi_close(&mr->fid);
	loop_close(&l);
}

int main(int argc, char **argv)
{
	prov = argc > 1 ? argv[1] : "tcp";
	type = argc > 2 && !strcmp(argv[2], "msg") ? FI_EP_MSG : FI_EP_RDM;
	struct { uint32_t version; int mr_mode; const char *what; } same[] = {
		{ FI_VERSION(1, 17), FI_MR_BASIC, "FI_MR_BASIC" },
		{ FI_VERSION(1, 17), FI_MR_SCALABLE, "FI_MR_SCALABLE" },
		{ FI_VERSION(1, 17), FI_MR_UNSPEC, "0" },
		{ FI_VERSION(1, 17), FI_MR_LOCAL, "FI_MR_LOCAL" },
		{ FI_VERSION(1, 17), FI_MR_BASIC | FI_MR_SCALABLE, "FI_MR_BASIC | FI_MR_SCALABLE" },
		{ FI_VERSION(1, 17), FI_MR_BASIC | FI_MR_LOCAL, "FI_MR_BASIC | FI_MR_LOCAL" },
		{ FI_VERSION(1, 0), FI_MR_UNSPEC, "API 1.0, FI_MR_UNSPEC" },
		{ FI_VERSION(1, 0), FI_MR_BASIC, "API 1.0, FI_MR_BASIC" },
		{ FI_VERSION(1, 0), FI_MR_SCALABLE, "API 1.0, FI_MR_SCALABLE" },
		{ FI_VERSION(1, 4), FI_MR_UNSPEC, "API 1.4, FI_MR_UNSPEC" },
		{ FI_VERSION(1, 5), FI_MR_UNSPEC, "API 1.5, 0" },
		{ FI_VERSION(1, 5), FI_MR_BASIC, "API 1.5, FI_MR_BASIC" },
	};
	int mode, allowed;

	start();
	for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
		int r = ask(same[i].version, same[i].mr_mode, &mode, &allowed);
		SAME("hints %s: %d, mr_mode %#x", same[i].what, r, mode);
	}
	/* Hints that allow the new modes: an offer may require or prefer only
	 * those (libfabric 1.17's tcp answers 0, its shm FI_MR_VIRT_ADDR; ofi
	 * keeps the three it prefers). */
	int new_modes[] = { FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY,
			    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ENDPOINT,
			    ~(FI_MR_BASIC | FI_MR_SCALABLE) };
	for (size_t i = 0; i < sizeof new_modes / sizeof new_modes[0]; i++) {
		int r = ask(FI_VERSION(1, 17), new_modes[i], &mode, &allowed);
		char what[80];
		snprintf(what, sizeof what, "hints %#x: offers with allowed modes only", new_modes[i]);
		CHECK(what, r == 0 && allowed);
	}
	if (type == FI_EP_RDM) {
		write_by(FI_MR_BASIC);
		write_by(FI_MR_SCALABLE);
		regattr_ignores_iface();
	}
	return finish();
}
