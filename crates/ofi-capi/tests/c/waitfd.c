/* Item 3 of issue 16: the fd of an FI_WAIT_FD object (fi_control
 * FI_GETWAIT) is readable whenever the object has something to read,
 * without a prior fi_trywait, and stays readable until it is drained.
 * Usage: waitfd PROV (tcp or shm). */
#include "common.h"

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fi_eq_entry entry = { .context = (void *)0x5 }, got;
	uint32_t event;
	int fd = -1, r;

	start();
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_RDM;
	r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
	CHECK("getinfo", r == 0);
	if (r)
		return finish();
	struct fid_fabric *fab;
	CHECK("fabric", fi_fabric(info->fabric_attr, &fab, NULL) == 0);

	/* Event queue. */
	struct fi_eq_attr eq_attr = { .size = 8, .wait_obj = FI_WAIT_FD };
	struct fid_eq *eq;
	CHECK("eq open with FI_WAIT_FD", fi_eq_open(fab, &eq_attr, &eq, NULL) == 0);
	r = fi_control(&eq->fid, FI_GETWAIT, &fd);
	SAME("eq FI_GETWAIT %d", r);
	CHECK("eq fd", r == 0 && fd >= 0);
	SAME("eq fd readable when empty: %d", readable(fd));
	SAME("eq write %zd", fi_eq_write(eq, FI_NOTIFY, &entry, sizeof entry, 0));
	SAME("eq write %zd", fi_eq_write(eq, FI_NOTIFY, &entry, sizeof entry, 0));
	CHECK("eq fd readable after fi_eq_write, no fi_trywait", readable(fd));
	CHECK("eq fd still readable when polled again", readable(fd));
	SAME("eq read %zd", fi_eq_read(eq, &event, &got, sizeof got, 0));
	CHECK("eq fd readable while one event is queued", readable(fd));
	SAME("eq read %zd", fi_eq_read(eq, &event, &got, sizeof got, 0));
	SAME("eq read when drained %zd", fi_eq_read(eq, &event, &got, sizeof got, 0));
	/* libfabric 1.17 keeps the fd readable until the next fi_trywait. */
	CHECK_OFI("eq fd not readable once drained", !readable(fd));
	struct fid *eq_fids[] = { &eq->fid };
	SAME("eq trywait when drained %d", fi_trywait(fab, eq_fids, 1));
	CHECK("eq fd not readable after a successful trywait", !readable(fd));
	/* fi_eq_write keeps what the application wrote, whatever its length
	 * (fi_eq(3)): a 16-byte CM entry and a 64-byte entry come back whole
	 * (ofi refused the first and cut the second to 24 bytes). */
	struct fi_eq_cm_entry cm_in = { .fid = &eq->fid }, cm_out = { 0 };
	SAME("eq write of a CM entry %zd", fi_eq_write(eq, FI_SHUTDOWN, &cm_in, sizeof cm_in, 0));
	struct { struct fi_eq_entry h; char tag[40]; } big = { .h.context = (void *)0x7 }, big_out = { 0 };
	strcpy(big.tag, "hello");
	SAME("eq write of 64 bytes %zd", fi_eq_write(eq, FI_NOTIFY, &big, sizeof big, 0));
	ssize_t got_n = fi_eq_read(eq, &event, &cm_out, sizeof cm_out, 0);
	SAME("eq read of the CM entry %zd, event %u", got_n, event);
	CHECK("the CM entry comes back", got_n == (ssize_t)sizeof cm_out && cm_out.fid == &eq->fid);
	/* Into a generic entry's 24 bytes: truncated, as libfabric does. */
	SAME("eq read of 64 bytes into 24 %zd", fi_eq_read(eq, &event, &got, sizeof got, 0));
	CHECK("the truncated entry's header", got.context == (void *)0x7);
	SAME("eq write of 64 bytes %zd", fi_eq_write(eq, FI_NOTIFY, &big, sizeof big, 0));
	got_n = fi_eq_read(eq, &event, &big_out, sizeof big_out, 0);
	SAME("eq read of the 64 bytes %zd, event %u", got_n, event);
	CHECK("the 64 bytes come back whole", got_n == (ssize_t)sizeof big &&
	      big_out.h.context == (void *)0x7 && !strcmp(big_out.tag, "hello"));
	/* fi_eq_read(eq, NULL, NULL, 0, FI_PEEK): a probe, as libfabric uses
	 * it (ofi answered -FI_EINVAL). */
	SAME("probe of an empty EQ %zd", fi_eq_read(eq, NULL, NULL, 0, FI_PEEK));
	SAME("eq write %zd", fi_eq_write(eq, FI_NOTIFY, &entry, sizeof entry, 0));
	SAME("probe with an event queued %zd", fi_eq_read(eq, NULL, NULL, 0, FI_PEEK));
	SAME("the event is still there %zd", fi_eq_read(eq, &event, &got, sizeof got, 0));
	CHECK("eq close", fi_close(&eq->fid) == 0);

	/* Completion queue: libfabric 1.17's shm has no FI_WAIT_FD CQs
	 * (fi_cq_open returns -FI_ENOSYS), so on shm this part is ofi's. */
	if (strcmp(prov, "shm") || on_ofi) {
		struct loop l;
		struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_FD };
		static char out[2][16], in[2][16];
		struct fi_cq_entry e[4];
		r = loop_open(&l, prov, FI_MSG, &cq_attr);
		CHECK("loop endpoint with an FI_WAIT_FD CQ", r == 0);
		if (r)
			return finish();
		CHECK("cq FI_GETWAIT", fi_control(&l.cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0);
		CHECK("cq fd not readable when empty", !readable(fd));
		for (int i = 0; i < 2; i++)
			CHECK("recv posted", RETRY(&l, fi_recv(l.ep, in[i], 16, NULL, FI_ADDR_UNSPEC, NULL)) == 0);
		for (int i = 0; i < 2; i++)
			CHECK("send posted", RETRY(&l, fi_send(l.ep, out[i], 16, NULL, l.self, NULL)) == 0);
		/* Four completions: take one, then wait for the rest to be queued. */
		CHECK("one completion read", loop_complete(&l, 1) == 1);
		ssize_t n = -FI_EAGAIN;
		for (double end = now_s() + 10; n == -FI_EAGAIN && now_s() < end;)
			n = fi_cq_read(l.cq, NULL, 0);
		CHECK("more completions queued (fi_cq_read(cq, NULL, 0) returns 0)", n == 0);
		CHECK("cq fd readable with completions queued, no fi_trywait", readable(fd));
		n = fi_cq_read(l.cq, e, 1);
		CHECK("cq read one", n == 1);
		CHECK("cq fd readable while completions remain", readable(fd));
		CHECK("the last two completions", loop_complete(&l, 2) == 2);
		CHECK("cq empty", fi_cq_read(l.cq, e, 4) == -FI_EAGAIN);
		/* libfabric 1.17 keeps the fd readable until the next fi_trywait. */
		CHECK_OFI("cq fd not readable once drained", !readable(fd));
		struct fid *cq_fids[] = { &l.cq->fid };
		int t = fi_trywait(l.fab, cq_fids, 1);
		CHECK("cq trywait when drained", t == 0);
		CHECK("cq fd not readable after a successful trywait", !readable(fd));
		/* fi_cq_signal wakes a waiter on the fd; the next fi_trywait
		 * takes the signal (the CQ is empty), and the fd is quiet again
		 * (it stayed readable, so an epoll loop spun). */
		CHECK("cq signal", fi_cq_signal(l.cq) == 0);
		CHECK("cq fd readable after fi_cq_signal", readable(fd));
		CHECK("cq trywait after a signal, nothing queued", fi_trywait(l.fab, cq_fids, 1) == 0);
		CHECK("cq fd not readable once trywait took the signal", !readable(fd));
		/* A blocked sread takes it too: the fd is quiet afterwards. */
		CHECK("cq signal again", fi_cq_signal(l.cq) == 0);
		CHECK("cq sread returns -FI_EAGAIN on the signal",
		      fi_cq_sread(l.cq, e, 1, NULL, 5000) == -FI_EAGAIN);
		CHECK("cq trywait after the sread", fi_trywait(l.fab, cq_fids, 1) == 0);
		CHECK("cq fd not readable after sread took the signal", !readable(fd));
		loop_close(&l);
	} else {
		printf("skip on libfabric: shm CQs with FI_WAIT_FD\n");
	}

	/* Counter: libfabric 1.17 has no wait fd for counters (tcp: FI_GETWAIT
	 * returns -FI_ENOSYS; shm: fi_cntr_open with FI_WAIT_FD returns
	 * -FI_ENOSYS). ofi: readable when the count changed since it was last
	 * read, until it is read. */
	if (on_ofi) {
		struct fid_domain *dom;
		struct fid_cntr *cntr;
		struct fi_cntr_attr cntr_attr = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_FD };
		CHECK("domain", fi_domain(fab, info, &dom, NULL) == 0);
		CHECK("counter with FI_WAIT_FD", fi_cntr_open(dom, &cntr_attr, &cntr, NULL) == 0);
		CHECK("cntr FI_GETWAIT", fi_control(&cntr->fid, FI_GETWAIT, &fd) == 0 && fd >= 0);
		CHECK("cntr fd not readable when unchanged", !readable(fd));
		CHECK("cntr add", fi_cntr_add(cntr, 2) == 0);
		CHECK("cntr fd readable after an add", readable(fd));
		CHECK("cntr fd still readable", readable(fd));
		CHECK("cntr read", fi_cntr_read(cntr) == 2);
		CHECK("cntr fd not readable once read", !readable(fd));
		CHECK("cntr adderr", fi_cntr_adderr(cntr, 1) == 0);
		CHECK("cntr fd readable after an error", readable(fd));
		CHECK("cntr readerr", fi_cntr_readerr(cntr) == 1);
		CHECK("cntr fd not readable once the error count is read", !readable(fd));
		CHECK("cntr close", fi_close(&cntr->fid) == 0);
		CHECK("domain close", fi_close(&dom->fid) == 0);
	}

	/* Negative: FI_GETWAIT on an object opened without a wait object, and
	 * with a NULL argument (libfabric 1.17 crashes on both). */
	struct fi_eq_attr none = { .size = 8, .wait_obj = FI_WAIT_NONE };
	CHECK("eq without a wait object", fi_eq_open(fab, &none, &eq, NULL) == 0);
	if (on_ofi) {
		CHECK("FI_GETWAIT on FI_WAIT_NONE is -FI_ENODATA",
		      fi_control(&eq->fid, FI_GETWAIT, &fd) == -FI_ENODATA);
		CHECK("FI_GETWAIT with NULL is -FI_EINVAL",
		      fi_control(&eq->fid, FI_GETWAIT, NULL) == -FI_EINVAL);
	}
	CHECK("eq close", fi_close(&eq->fid) == 0);
	CHECK("fabric close", fi_close(&fab->fid) == 0);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return finish();
}
