/* Item 9 of issue 16: poll sets (fi_poll_open, fi_poll_add, fi_poll_del,
 * fi_poll over CQs and counters) and wait sets (fi_wait_open, fi_wait with
 * CQs, counters and EQs opened into the set). Usage: sets PROV. */
#include "common.h"

#define CNTR_CTX ((void *)0x22)

static void poll_sets(const char *prov)
{
	struct loop l;
	int r = loop_open(&l, prov, FI_MSG, NULL);
	CHECK("loop endpoint", r == 0);
	if (r)
		return;
	struct fi_poll_attr attr = { 0 }, flagged = { .flags = 1 };
	struct fid_poll *ps, *bad;
	SAME("poll_open %d", fi_poll_open(l.dom, &attr, &ps));
	SAME("poll_open with reserved flags %d", fi_poll_open(l.dom, &flagged, &bad));
	struct fi_cntr_attr ca = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE };
	struct fid_cntr *cntr;
	CHECK("counter", fi_cntr_open(l.dom, &ca, &cntr, CNTR_CTX) == 0);
	SAME("poll_add cq %d", fi_poll_add(ps, &l.cq->fid, 0));
	SAME("poll_add cntr %d", fi_poll_add(ps, &cntr->fid, 0));
	SAME("poll_add of a domain %d", fi_poll_add(ps, &l.dom->fid, 0));
	void *ctx[4] = { 0 };
	SAME("poll with nothing new %d", fi_poll(ps, ctx, 4));
	fi_cntr_add(cntr, 1);
	r = fi_poll(ps, ctx, 4);
	SAME("poll after a counter add %d", r);
	CHECK("the counter's context", r == 1 && ctx[0] == CNTR_CTX);
	SAME("poll again, the counter unchanged %d", fi_poll(ps, ctx, 4));
	/* The context is the fid's at poll time (ofi kept the one of
	 * fi_poll_add). */
	cntr->fid.context = (void *)0x77;
	fi_cntr_add(cntr, 1);
	r = fi_poll(ps, ctx, 4);
	CHECK("the counter's context as it is now", r == 1 && ctx[0] == (void *)0x77);
	cntr->fid.context = CNTR_CTX;

	static char out[16] = "poll", in[16];
	CHECK("recv", RETRY(&l, fi_recv(l.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, NULL)) == 0);
	CHECK("send", RETRY(&l, fi_send(l.ep, out, sizeof out, NULL, l.self, NULL)) == 0);
	/* fi_poll alone drives progress until the CQ has news. */
	r = 0;
	for (double end = now_s() + 10; r == 0 && now_s() < end;)
		r = fi_poll(ps, ctx, 4);
	CHECK("fi_poll names the CQ once it holds completions", r == 1 && ctx[0] == &l);
	CHECK("two completions", loop_complete(&l, 2) == 2);
	SAME("poll once drained %d", fi_poll(ps, ctx, 4));
	SAME("poll with room for none %d", fi_poll(ps, ctx, 0));
	/* A member cannot close (libfabric 1.17 closes it and later frees it
	 * twice). */
	if (on_ofi)
		CHECK("closing a CQ in a poll set is -FI_EBUSY", fi_close(&l.cq->fid) == -FI_EBUSY);
	/* libfabric 1.17 closes a poll set with members (man page: -FI_EBUSY). */
	if (on_ofi)
		CHECK("closing a poll set with members is -FI_EBUSY", fi_close(&ps->fid) == -FI_EBUSY);
	SAME("poll_del cq %d", fi_poll_del(ps, &l.cq->fid, 0));
	SAME("poll_del cntr %d", fi_poll_del(ps, &cntr->fid, 0));
	/* libfabric 1.17 answers 0 for an object that is not a member. */
	CHECK_OFI("poll_del of a non-member is -FI_EINVAL", fi_poll_del(ps, &l.cq->fid, 0) == -FI_EINVAL);
	if (on_ofi) {
		/* Negative arguments libfabric 1.17 does not check. */
		CHECK("fi_poll with a NULL array is -FI_EINVAL", fi_poll(ps, NULL, 1) == -FI_EINVAL);
		CHECK("fi_poll with a negative count is -FI_EINVAL", fi_poll(ps, ctx, -1) == -FI_EINVAL);
		CHECK("poll_add of NULL is -FI_EINVAL", fi_poll_add(ps, NULL, 0) == -FI_EINVAL);
	}
	SAME("poll set close %d", fi_close(&ps->fid));
	SAME("counter close %d", fi_close(&cntr->fid));
	loop_close(&l);
}

static void wait_sets(const char *prov)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_RDM;
	CHECK("getinfo", fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info) == 0);
	fi_freeinfo(hints);
	struct fid_fabric *fab;
	CHECK("fabric", fi_fabric(info->fabric_attr, &fab, NULL) == 0);
	fi_freeinfo(info);

	struct fi_wait_attr wa = { .wait_obj = FI_WAIT_FD }, none = { .wait_obj = FI_WAIT_NONE };
	struct fid_wait *ws, *bad;
	SAME("wait_open FI_WAIT_FD %d", fi_wait_open(fab, &wa, &ws));
	/* libfabric 1.17: -FI_EINVAL on tcp, -FI_ENOSYS on shm. */
	CHECK("wait_open FI_WAIT_NONE fails", fi_wait_open(fab, &none, &bad) < 0);
	int fd = -1;
	SAME("wait set FI_GETWAIT %d", fi_control(&ws->fid, FI_GETWAIT, &fd));
	SAME("fi_wait without members %d", fi_wait(ws, 0));

	struct fi_eq_attr ea = { .size = 8, .wait_obj = FI_WAIT_SET, .wait_set = ws };
	struct fi_eq_attr no_set = { .size = 8, .wait_obj = FI_WAIT_SET, .wait_set = NULL };
	struct fid_eq *eq, *eq_bad;
	int r = fi_eq_open(fab, &ea, &eq, NULL);
	SAME("eq open into the set %d", r);
	if (r)
		return;
	SAME("eq open with FI_WAIT_SET and no set %d", fi_eq_open(fab, &no_set, &eq_bad, NULL));
	SAME("fi_wait 10 ms, nothing to read %d", fi_wait(ws, 10));
	SAME("set fd readable with nothing to read %d", readable(fd));
	struct fi_eq_entry e = { .context = (void *)7 };
	uint32_t event;
	SAME("eq write %zd", fi_eq_write(eq, FI_NOTIFY, &e, sizeof e, 0));
	CHECK("set fd readable once the EQ has an event", readable(fd));
	SAME("fi_wait with an event queued %d", fi_wait(ws, 0));
	SAME("fi_wait again %d", fi_wait(ws, 0));
	SAME("eq read %zd", fi_eq_read(eq, &event, &e, sizeof e, 0));
	SAME("fi_wait once drained %d", fi_wait(ws, 0));
	struct fid *fids[] = { &ws->fid };
	SAME("trywait on the set %d", fi_trywait(fab, fids, 1));
	SAME("set fd readable after trywait %d", readable(fd));

	/* CQs and counters in a wait set: libfabric 1.17's shm refuses them
	 * (fi_cq_open and fi_cntr_open return -FI_ENOSYS). */
	if (strcmp(prov, "shm") || on_ofi) {
		struct loop l;
		struct fi_cq_attr qa = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_SET, .wait_set = ws };
		r = loop_open(&l, prov, FI_MSG, &qa);
		CHECK("loop endpoint with its CQ in the wait set", r == 0);
		if (r)
			return;
		/* Checks, not comparisons: on shm this part runs on ofi alone. The
		 * values are libfabric 1.17's on tcp. */
		enum fi_wait_obj kind = FI_WAIT_NONE;
		CHECK("a CQ in an FI_WAIT_FD set has an FI_WAIT_FD wait object",
		      fi_control(&l.cq->fid, FI_GETWAITOBJ, &kind) == 0 && kind == FI_WAIT_FD);
		struct fi_cntr_attr ca = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_SET, .wait_set = ws };
		struct fid_cntr *cntr;
		CHECK("counter open into the set", fi_cntr_open(l.dom, &ca, &cntr, NULL) == 0);
		CHECK("fi_wait times out with nothing to read", fi_wait(ws, 0) == -FI_ETIMEDOUT);
		CHECK("cntr add", fi_cntr_add(cntr, 1) == 0);
		CHECK("fi_wait returns after a counter add", fi_wait(ws, 0) == 0);
		CHECK("counter read", fi_cntr_read(cntr) == 1);
		/* libfabric 1.17 reports the counter until the set's next trywait. */
		CHECK_OFI("fi_wait times out once the counter is read", fi_wait(ws, 0) == -FI_ETIMEDOUT);
		fi_trywait(fab, fids, 1);
		static char out[16] = "wait", in[16];
		CHECK("recv", RETRY(&l, fi_recv(l.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, NULL)) == 0);
		CHECK("send", RETRY(&l, fi_send(l.ep, out, sizeof out, NULL, l.self, NULL)) == 0);
		/* fi_wait alone drives progress until the CQ has completions. */
		r = fi_wait(ws, 5000);
		CHECK("fi_wait returns once the CQ has completions", r == 0);
		CHECK("two completions", loop_complete(&l, 2) == 2 && !strcmp(in, "wait"));
		/* fi_cq_signal on a member wakes fi_wait on the set, once (it
		 * used to leave the member's fd readable: fi_wait spun until its
		 * timeout and gave -FI_ETIMEDOUT). */
		fi_trywait(fab, fids, 1);
		CHECK("cq signal on a member", fi_cq_signal(l.cq) == 0);
		double t0 = now_s();
		r = fi_wait(ws, 3000);
		/* libfabric 1.17 fails this check. */
		CHECK_OFI("fi_wait returns on a member's signal", r == 0 && now_s() - t0 < 1.5);
		CHECK_OFI("the signal is taken: fi_wait times out after it",
			  fi_wait(ws, 50) == -FI_ETIMEDOUT);
		/* libfabric 1.17 closes a wait set that CQs, counters and EQs use
		 * (man page: -FI_EBUSY) and crashes later. */
		if (on_ofi)
			CHECK("closing a wait set in use is -FI_EBUSY", fi_close(&ws->fid) == -FI_EBUSY);
		CHECK("counter close", fi_close(&cntr->fid) == 0);
		loop_close(&l);
	}
	SAME("eq close %d", fi_close(&eq->fid));
	SAME("wait set close %d", fi_close(&ws->fid));
	SAME("fabric close %d", fi_close(&fab->fid));
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	start();
	poll_sets(prov);
	wait_sets(prov);
	return finish();
}
