/* Item 12 of issue 16: every atomic operation, datatype and form that
 * fi_query_atomic reports as supported works (one element, loopback);
 * the others are refused by the query, the *atomicvalid calls and the
 * call itself with -FI_EOPNOTSUPP, never -FI_EINVAL. Usage: atomics PROV. */
#include "common.h"

static const char *form_name[] = { "atomic", "fetch", "compare" };

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	struct loop l;
	static long double target[4], result[4], operand[4], compare[4];
	int r;

	start();
	r = loop_open(&l, prov, FI_MSG | FI_ATOMIC, NULL);
	CHECK("loop endpoint with FI_ATOMIC", r == 0);
	if (r)
		return finish();
	struct fid_mr *mr;
	r = fi_mr_reg(l.dom, target, sizeof target, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 1, 0, &mr, NULL);
	CHECK("target registered", r == 0);
	if (r)
		return finish();
	uint64_t key = fi_mr_key(mr);
	uint64_t addr = (l.info->domain_attr->mr_mode & (FI_MR_VIRT_ADDR | FI_MR_BASIC)) ?
		(uint64_t)(uintptr_t)target : 0;

	/* The case of the issue: FI_ATOMIC_READ of one FI_INT8 after every
	 * base operation and datatype ran. */
	int supported = 0, worked = 0, refused = 0, refused_right = 0;
	for (int form = 0; form < 3; form++)
		for (int op = FI_MIN; op <= FI_MSWAP; op++)
			for (int dt = FI_INT8; dt <= FI_LONG_DOUBLE_COMPLEX; dt++) {
				struct fi_atomic_attr attr;
				size_t count = 0;
				uint64_t flags = form == 0 ? 0 : form == 1 ? FI_FETCH_ATOMIC : FI_COMPARE_ATOMIC;
				int q = fi_query_atomic(l.dom, dt, op, &attr, flags);
				int v = form == 0 ? fi_atomicvalid(l.ep, dt, op, &count) :
					form == 1 ? fi_fetch_atomicvalid(l.ep, dt, op, &count) :
					fi_compare_atomicvalid(l.ep, dt, op, &count);
				char what[96];
				snprintf(what, sizeof what, "%s op %d datatype %d", form_name[form], op, dt);
				if (q != v) {
					printf("FAIL %s: query %d, valid %d\n", what, q, v);
					failures++;
				}
				/* Both libraries answer alike up to FI_DOUBLE; ofi also
				 * does the long double and complex types for more ops. */
				if (dt <= FI_DOUBLE)
					SAME("%s: query %d", what, q);
				if (q) {
					refused++;
					refused_right += q == -FI_EOPNOTSUPP;
					if (q != -FI_EOPNOTSUPP)
						printf("FAIL %s: query %d, want -FI_EOPNOTSUPP\n", what, q);
					/* libfabric 1.17 crashes on some refused calls. */
					if (on_ofi) {
						ssize_t c = form == 0 ?
							fi_atomic(l.ep, operand, 1, NULL, l.self, addr, key, dt, op, NULL) :
							form == 1 ?
							fi_fetch_atomic(l.ep, operand, 1, NULL, result, NULL, l.self, addr, key, dt, op, NULL) :
							fi_compare_atomic(l.ep, operand, 1, NULL, compare, NULL, result, NULL, l.self, addr, key, dt, op, NULL);
						if (c != -FI_EOPNOTSUPP) {
							printf("FAIL %s: refused call returned %zd, want -FI_EOPNOTSUPP\n", what, c);
							failures++;
						}
					}
					continue;
				}
				supported++;
				CHECK("a supported combination allows one element at least", attr.count >= 1 && count >= 1);
				memset(target, 0, sizeof target);
				ssize_t c = form == 0 ?
					RETRY(&l, fi_atomic(l.ep, operand, 1, NULL, l.self, addr, key, dt, op, NULL)) :
					form == 1 ?
					RETRY(&l, fi_fetch_atomic(l.ep, operand, 1, NULL, result, NULL, l.self, addr, key, dt, op, NULL)) :
					RETRY(&l, fi_compare_atomic(l.ep, operand, 1, NULL, compare, NULL, result, NULL, l.self, addr, key, dt, op, NULL));
				int done = c == 0 ? loop_complete(&l, 1) : (int)c;
				if (done == 1)
					worked++;
				else {
					printf("FAIL %s: call %zd, completion %d\n", what, c, done);
					failures++;
				}
			}
	printf("%d supported, %d worked; %d refused, %d with -FI_EOPNOTSUPP\n", supported, worked, refused, refused_right);
	CHECK("every refused combination is -FI_EOPNOTSUPP", refused == refused_right);

	/* FI_ATOMIC_READ of one FI_INT8, with and without an operand buffer. */
	int8_t *t8 = (int8_t *)target, *r8 = (int8_t *)result;
	for (int with_buf = 0; with_buf < 2; with_buf++) {
		t8[0] = 0x5a;
		r8[0] = 0;
		ssize_t c = RETRY(&l, fi_fetch_atomic(l.ep, with_buf ? operand : NULL, 1, NULL, r8, NULL,
						     l.self, addr, key, FI_INT8, FI_ATOMIC_READ, NULL));
		SAME("fetch FI_ATOMIC_READ of one FI_INT8 (operand %s): %zd", with_buf ? "given" : "NULL", c);
		CHECK("it completes with the target's value", c == 0 && loop_complete(&l, 1) == 1 && r8[0] == 0x5a);
		CHECK("the target is unchanged", t8[0] == 0x5a);
	}

	/* Negative: unknown operations and datatypes are unsupported, not
	 * invalid. */
	struct fi_atomic_attr attr;
	SAME("query of operation 99: %d", fi_query_atomic(l.dom, FI_INT32, 99, &attr, 0));
	SAME("query of datatype 99: %d", fi_query_atomic(l.dom, 99, FI_SUM, &attr, FI_FETCH_ATOMIC));
	size_t count;
	SAME("fetch_atomicvalid of datatype 99: %d", fi_fetch_atomicvalid(l.ep, 99, FI_SUM, &count));
	if (on_ofi) {
		CHECK("fi_atomic of operation 99 is -FI_EOPNOTSUPP",
		      fi_atomic(l.ep, operand, 1, NULL, l.self, addr, key, FI_INT32, 99, NULL) == -FI_EOPNOTSUPP);
		CHECK("fi_inject_atomic of datatype 99 is -FI_EOPNOTSUPP",
		      fi_inject_atomic(l.ep, operand, 1, l.self, addr, key, 99, FI_SUM) == -FI_EOPNOTSUPP);
	}
	/* FI_INJECT on a compare atomic (fi_atomic(3): the input buffers may
	 * be reused at return; ofi refused it with -FI_EINVAL). The inputs
	 * are overwritten at once: the operation uses the values given. */
	if (on_ofi) {
		uint64_t *t64 = (uint64_t *)target;
		t64[0] = 10;
		uint64_t swap = 20, cmp = 10, old = 0;
		struct fi_ioc opv = { &swap, 1 }, cmpv = { &cmp, 1 }, resv = { &old, 1 };
		struct fi_rma_ioc rv = { addr, 1, key };
		struct fi_msg_atomic m = { .msg_iov = &opv, .iov_count = 1, .addr = l.self,
					   .rma_iov = &rv, .rma_iov_count = 1, .datatype = FI_UINT64,
					   .op = FI_CSWAP, .context = &swap };
		ssize_t c = RETRY(&l, fi_compare_atomicmsg(l.ep, &m, &cmpv, NULL, 1, &resv, NULL, 1,
							    FI_INJECT | FI_COMPLETION));
		swap = 77;
		cmp = 99;
		CHECK("compare atomic with FI_INJECT", c == 0);
		CHECK("it completes with the values given at the call",
		      c == 0 && loop_complete(&l, 1) == 1 && old == 10 && t64[0] == 20);
	}

	/* The domain answers the same with no endpoint opened yet (ofi
	 * answered one element until the first fi_endpoint), and atomics into
	 * tagged receive buffers are not offered. */
	struct fid_fabric *fab2;
	struct fid_domain *dom2;
	struct fi_atomic_attr before = { 0 }, after = { 0 };
	CHECK("a second domain", fi_fabric(l.info->fabric_attr, &fab2, NULL) == 0 &&
	      fi_domain(fab2, l.info, &dom2, NULL) == 0);
	int qb = fi_query_atomic(dom2, FI_INT64, FI_SUM, &before, 0);
	int qa = fi_query_atomic(l.dom, FI_INT64, FI_SUM, &after, 0);
	SAME("query with no endpoint %d, with one %d", qb, qa);
	CHECK("the same count with and without an endpoint", qb == 0 && qa == 0 && before.count == after.count);
	CHECK_OFI("atomics into tagged receive buffers are not offered",
		  fi_query_atomic(l.dom, FI_INT64, FI_SUM, &after, FI_TAGGED) == -FI_EOPNOTSUPP);
	fi_close(&dom2->fid);
	fi_close(&fab2->fid);
	/* A counter a region counts into cannot close (fi_cntr(3)). */
	struct fi_cntr_attr ca = { .events = FI_CNTR_EVENTS_COMP };
	struct fid_cntr *rc;
	CHECK("counter", fi_cntr_open(l.dom, &ca, &rc, NULL) == 0);
	/* libfabric 1.17 answers -FI_ENOSYS to the binding. */
	if (on_ofi) {
		CHECK("mr bind to a counter", fi_mr_bind(mr, &rc->fid, FI_REMOTE_WRITE) == 0);
		CHECK("a counter a region counts into does not close", fi_close(&rc->fid) == -FI_EBUSY);
	}
	fi_close(&mr->fid);
	CHECK("the counter closes once the region is closed", fi_close(&rc->fid) == 0);
	loop_close(&l);
	return finish();
}
