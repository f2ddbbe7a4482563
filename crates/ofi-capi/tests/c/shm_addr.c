/* Items 1 and 2 of issue 16: shm addressing as clients without an
 * out-of-band address exchange use it (fi_shm(7)). The server asks for
 * getinfo("127.0.0.1", SERVICE, FI_SOURCE) and names its endpoint from the
 * offer's src_addr; the client (a forked process) asks for
 * getinfo("127.0.0.1", SERVICE, 0), inserts the offer's dest_addr, sends
 * its own name first, and the server answers to that name. Every offer
 * has a source address. */
#include "common.h"
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static char service[16];

static struct fi_info *shm_hints(void)
{
	struct fi_info *h = fi_allocinfo();
	h->fabric_attr->prov_name = strdup("shm");
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG;
	h->mode = 0;
	return h;
}

/* The address as text, with the service replaced by SVC (it differs from
 * run to run) and the pid by PID. */
static void shown(const void *addr, size_t len, char *out, size_t room)
{
	char a[256] = "(none)";
	if (addr && len) {
		snprintf(a, sizeof a, "%.*s", (int)len, (const char *)addr);
	}
	char pid[16];
	snprintf(pid, sizeof pid, "%d", (int)getpid());
	char *s = strstr(a, service);
	char *p = strstr(a, pid);
	if (s)
		snprintf(out, room, "%.*sSVC%s", (int)(s - a), a, s + strlen(service));
	else if (p)
		snprintf(out, room, "%.*sPID%s", (int)(p - a), a, p + strlen(pid));
	else
		snprintf(out, room, "%s", a);
}

struct side {
	struct fi_info *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
};

static int side_open(struct side *s, const char *node, uint64_t flags)
{
	struct fi_info *h = shm_hints();
	int r = fi_getinfo(FI_VERSION(1, 17), node, service, flags, h, &s->info);
	fi_freeinfo(h);
	if (r)
		return r;
	if ((r = fi_fabric(s->info->fabric_attr, &s->fab, NULL)))
		return r;
	if ((r = fi_domain(s->fab, s->info, &s->dom, NULL)))
		return r;
	struct fi_av_attr av_attr = { .type = FI_AV_UNSPEC };
	if ((r = fi_av_open(s->dom, &av_attr, &s->av, NULL)))
		return r;
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE };
	if ((r = fi_cq_open(s->dom, &cq_attr, &s->cq, NULL)))
		return r;
	if ((r = fi_endpoint(s->dom, s->info, &s->ep, NULL)))
		return r;
	if ((r = fi_ep_bind(s->ep, &s->av->fid, 0)))
		return r;
	if ((r = fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV)))
		return r;
	return fi_enable(s->ep);
}

static void side_close(struct side *s)
{
	if (s->ep)
		fi_close(&s->ep->fid);
	if (s->cq)
		fi_close(&s->cq->fid);
	if (s->av)
		fi_close(&s->av->fid);
	if (s->dom)
		fi_close(&s->dom->fid);
	if (s->fab)
		fi_close(&s->fab->fid);
	if (s->info)
		fi_freeinfo(s->info);
}

/* Waits (10 s at most) for one completion; 1 when it came. */
static int one(struct side *s)
{
	struct fi_cq_entry e;
	double end = now_s() + 10;
	while (now_s() < end) {
		ssize_t r = fi_cq_read(s->cq, &e, 1);
		if (r == 1)
			return 1;
		if (r != -FI_EAGAIN)
			return 0;
	}
	return 0;
}

static ssize_t send_retry(struct side *s, const void *b, size_t n, fi_addr_t to)
{
	ssize_t r;
	double end = now_s() + 10;
	while ((r = fi_send(s->ep, b, n, NULL, to, NULL)) == -FI_EAGAIN && now_s() < end)
		fi_cq_read(s->cq, NULL, 0);
	return r;
}

/* The client: reaches the server by its offer's dest_addr. */
static int client(int ready)
{
	char c;
	if (read(ready, &c, 1) != 1)
		return 2;
	struct side s = { 0 };
	int r = side_open(&s, "127.0.0.1", 0);
	CHECK("client opens on getinfo(127.0.0.1, SVC, 0)", r == 0);
	if (r)
		return 1;
	char a[256];
	shown(s.info->dest_addr, s.info->dest_addrlen, a, sizeof a);
	SAME("client dest_addr %s", a);
	fi_addr_t server = FI_ADDR_NOTAVAIL;
	r = fi_av_insert(s.av, s.info->dest_addr, 1, &server, 0, NULL);
	CHECK("the client inserts its dest_addr", r == 1 && server != FI_ADDR_NOTAVAIL);
	char name[256] = { 0 };
	size_t len = sizeof name;
	CHECK("client getname", fi_getname(&s.ep->fid, name, &len) == 0);
	char pong[16] = { 0 };
	CHECK("client posts its receive", fi_recv(s.ep, pong, sizeof pong, NULL, FI_ADDR_UNSPEC, NULL) == 0);
	CHECK("the client sends its name", send_retry(&s, name, len, server) == 0);
	/* The send's completion and the answer. */
	CHECK("the client's send completes", one(&s));
	CHECK("the server's answer arrives", one(&s));
	CHECK("it is pong", !strcmp(pong, "pong"));
	side_close(&s);
	return failures != 0;
}

int main(void)
{
	start();
	snprintf(service, sizeof service, "%d", 20000 + (int)getpid() % 30000);

	/* Item 2: every offer has a source address. */
	struct fi_info *list = NULL;
	int r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, NULL, &list);
	SAME("getinfo without anything: %d", r);
	int n = 0, with_src = 0;
	for (struct fi_info *i = r ? NULL : list; i; i = i->next, n++)
		with_src += i->src_addr && i->src_addrlen;
	CHECK("every offer without hints has a source address", n > 0 && with_src == n);
	if (!r)
		fi_freeinfo(list);
	const char *nodes[] = { NULL, "127.0.0.1", "fi_shm://box" };
	for (int k = 0; k < 3; k++) {
		for (int f = 0; f < 2; f++) {
			for (int svc = 0; svc < 2; svc++) {
				struct fi_info *h = shm_hints();
				r = fi_getinfo(FI_VERSION(1, 17), nodes[k], svc ? service : NULL,
					       f ? FI_SOURCE : 0, h, &list);
				fi_freeinfo(h);
				char src[256] = "", dst[256] = "";
				if (!r) {
					shown(list->src_addr, list->src_addrlen, src, sizeof src);
					shown(list->dest_addr, list->dest_addrlen, dst, sizeof dst);
				}
				char what[700];
				snprintf(what, sizeof what, "shm node %s service %s %s: %d src %s dest %s",
					 nodes[k] ? nodes[k] : "-", svc ? "SVC" : "-", f ? "FI_SOURCE" : "0", r, src, dst);
				if (!nodes[k] && !svc && f) {
					/* libfabric 1.17 answers -FI_ENODATA here; fi_shm(7)
					 * says the source is then fi_shm://PID. */
					CHECK_OFI(what, !r && !strcmp(src, "fi_shm://PID"));
				} else {
					SAME("%s", what);
					CHECK("the offer has a source address", !r && list->src_addr && list->src_addrlen);
				}
				if (!r)
					fi_freeinfo(list);
			}
		}
	}

	/* Item 1: the server named from its source address. */
	int pipefd[2];
	if (pipe(pipefd))
		return 2;
	pid_t kid = fork();
	if (kid == 0) {
		close(pipefd[1]);
		failures = 0; /* the client's own count */
		alarm(30);
		exit(client(pipefd[0]));
	}
	close(pipefd[0]);
	struct side s = { 0 };
	r = side_open(&s, "127.0.0.1", FI_SOURCE);
	CHECK("server opens on getinfo(127.0.0.1, SVC, FI_SOURCE)", r == 0);
	char a[256];
	if (!r) {
		shown(s.info->src_addr, s.info->src_addrlen, a, sizeof a);
		SAME("server src_addr %s", a);
		char name[256] = { 0 };
		size_t len = sizeof name;
		r = fi_getname(&s.ep->fid, name, &len);
		shown(name, len, a, sizeof a);
		SAME("server getname: %d %s", r, a);
	}
	char peer[256] = { 0 };
	if (!r)
		CHECK("server posts its receive", fi_recv(s.ep, peer, sizeof peer, NULL, FI_ADDR_UNSPEC, NULL) == 0);
	/* The client may start. */
	if (write(pipefd[1], "go", 1) != 1)
		return 2;
	if (!r && one(&s)) {
		fi_addr_t cli = FI_ADDR_NOTAVAIL;
		CHECK("the server inserts the client's name",
		      fi_av_insert(s.av, peer, 1, &cli, 0, NULL) == 1 && cli != FI_ADDR_NOTAVAIL);
		CHECK("the server answers", send_retry(&s, "pong", 5, cli) == 0);
		CHECK("the answer completes", one(&s));
	} else {
		CHECK("the client's name arrives", 0);
	}
	int st = 0;
	/* Let the client drain the answer while this side keeps progressing. */
	double end = now_s() + 20;
	pid_t w = 0;
	while ((w = waitpid(kid, &st, WNOHANG)) == 0 && now_s() < end)
		if (s.cq)
			fi_cq_read(s.cq, NULL, 0);
	if (w == 0) {
		kill(kid, SIGKILL);
		waitpid(kid, &st, 0);
	}
	if (!(w == kid && WIFEXITED(st) && WEXITSTATUS(st) == 0))
		printf("client: waited %d, status %#x\n", (int)w, st);
	CHECK("the client passed", w == kid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	side_close(&s);
	return finish();
}
