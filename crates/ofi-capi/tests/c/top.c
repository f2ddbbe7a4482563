/* Exercises the top-level entry points of the libfabric.so.1 it is linked
 * with. Prints "ok <what>" per passed check and "FAIL <what>" otherwise;
 * exits non-zero on any failure. Blocks "== tostr <n>" hold fi_tostr of
 * each offer of fi_getinfo(NULL hints). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/providers/fi_prov.h>
#include <rdma/providers/fi_log.h>

static int failures;
#define CHECK(what, cond) do { \
	if (cond) printf("ok %s\n", what); \
	else { printf("FAIL %s (line %d)\n", what, __LINE__); failures++; } \
} while (0)

/* FABRIC_1.0 layouts. */
struct tx_attr_1_0 { uint64_t caps, mode, op_flags, msg_order, comp_order; size_t inject_size, size, iov_limit, rma_iov_limit; };
struct ep_attr_1_0 { enum fi_ep_type type; uint32_t protocol, protocol_version; size_t max_msg_size, msg_prefix_size, max_order_raw_size, max_order_war_size, max_order_waw_size; uint64_t mem_tag_format; size_t tx_ctx_cnt, rx_ctx_cnt; };
struct domain_attr_1_0 { struct fid_domain *domain; char *name; enum fi_threading threading; enum fi_progress control_progress, data_progress; enum fi_resource_mgmt resource_mgmt; enum fi_av_type av_type; int mr_mode; size_t mr_key_size, cq_data_size, cq_cnt, ep_cnt, tx_ctx_cnt, rx_ctx_cnt, max_ep_tx_ctx, max_ep_rx_ctx, max_ep_stx_ctx, max_ep_srx_ctx; };
struct fabric_attr_1_0 { struct fid_fabric *fabric; char *name; char *prov_name; uint32_t prov_version; };
struct info_1_0 { struct info_1_0 *next; uint64_t caps, mode; uint32_t addr_format; size_t src_addrlen, dest_addrlen; void *src_addr, *dest_addr; fid_t handle;
	struct tx_attr_1_0 *tx_attr; struct fi_rx_attr *rx_attr; struct ep_attr_1_0 *ep_attr; struct domain_attr_1_0 *domain_attr; struct fabric_attr_1_0 *fabric_attr; };

/* FABRIC_1.1 (1.2 adds nic at the end): 1.0 tx attributes, today's ep and fabric attributes, domain attributes without tclass. */
struct domain_attr_1_1 { struct fid_domain *domain; char *name; enum fi_threading threading; enum fi_progress control_progress, data_progress; enum fi_resource_mgmt resource_mgmt; enum fi_av_type av_type; int mr_mode; size_t mr_key_size, cq_data_size, cq_cnt, ep_cnt, tx_ctx_cnt, rx_ctx_cnt, max_ep_tx_ctx, max_ep_rx_ctx, max_ep_stx_ctx, max_ep_srx_ctx, cntr_cnt, mr_iov_limit; uint64_t caps, mode; uint8_t *auth_key; size_t auth_key_size, max_err_data, mr_cnt; };
struct info_1_2 { struct info_1_2 *next; uint64_t caps, mode; uint32_t addr_format; size_t src_addrlen, dest_addrlen; void *src_addr, *dest_addr; fid_t handle;
	struct tx_attr_1_0 *tx_attr; struct fi_rx_attr *rx_attr; struct fi_ep_attr *ep_attr; struct domain_attr_1_1 *domain_attr; struct fi_fabric_attr *fabric_attr; struct fid_nic *nic; };

__asm__(".symver getinfo_1_1, fi_getinfo@FABRIC_1.1");
int getinfo_1_1(uint32_t, const char *, const char *, uint64_t, const struct info_1_2 *, struct info_1_2 **);
__asm__(".symver getinfo_1_2, fi_getinfo@FABRIC_1.2");
int getinfo_1_2(uint32_t, const char *, const char *, uint64_t, const struct info_1_2 *, struct info_1_2 **);
__asm__(".symver dupinfo_1_1, fi_dupinfo@FABRIC_1.1");
struct info_1_2 *dupinfo_1_1(const struct info_1_2 *);
__asm__(".symver dupinfo_1_2, fi_dupinfo@FABRIC_1.2");
struct info_1_2 *dupinfo_1_2(const struct info_1_2 *);
__asm__(".symver freeinfo_1_2, fi_freeinfo@FABRIC_1.2");
void freeinfo_1_2(struct info_1_2 *);
__asm__(".symver getinfo_1_0, fi_getinfo@FABRIC_1.0");
int getinfo_1_0(uint32_t, const char *, const char *, uint64_t, const struct info_1_0 *, struct info_1_0 **);
__asm__(".symver dupinfo_1_0, fi_dupinfo@FABRIC_1.0");
struct info_1_0 *dupinfo_1_0(const struct info_1_0 *);
__asm__(".symver freeinfo_1_0, fi_freeinfo@FABRIC_1.0");
void freeinfo_1_0(struct info_1_0 *);
__asm__(".symver fabric_1_0, fi_fabric@FABRIC_1.0");
int fabric_1_0(struct fabric_attr_1_0 *, struct fid_fabric **, void *);

static int all_from(struct fi_info *list, const char *prov)
{
	int n = 0;
	for (struct fi_info *i = list; i; i = i->next, n++)
		if (!i->fabric_attr || strcmp(i->fabric_attr->prov_name, prov))
			return -1;
	return n;
}

int main(void)
{
	struct fi_info *info = NULL, *hints, *dup;
	int ret;

	CHECK("fi_version is 1.17", fi_version() == FI_VERSION(1, 17));

	ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, NULL, &info);
	CHECK("getinfo with NULL hints succeeds", ret == 0 && info);
	int n = 0, shm = 0, tcp = 0;
	for (struct fi_info *i = info; i; i = i->next, n++) {
		if (!i->tx_attr || !i->rx_attr || !i->ep_attr || !i->domain_attr || !i->fabric_attr)
			break;
		shm += !strcmp(i->fabric_attr->prov_name, "shm");
		tcp += !strcmp(i->fabric_attr->prov_name, "tcp");
		printf("== tostr %d\n%s== end\n", n, fi_tostr(i, FI_TYPE_INFO));
	}
	CHECK("every offer has its five attribute structs and shm and tcp are offered", shm > 0 && tcp > 0);
	fi_freeinfo(info);

	hints = fi_allocinfo();
	CHECK("fi_allocinfo gives all attribute structs",
	      hints && hints->tx_attr && hints->rx_attr && hints->ep_attr && hints->domain_attr && hints->fabric_attr);
	hints->fabric_attr->prov_name = strdup("shm");
	ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
	CHECK("prov_name shm gives only shm offers", ret == 0 && all_from(info, "shm") > 0);
	fi_freeinfo(info);
	free(hints->fabric_attr->prov_name);
	hints->fabric_attr->prov_name = strdup("tcp");
	hints->ep_attr->type = FI_EP_MSG;
	ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
	CHECK("prov_name tcp gives only tcp offers", ret == 0 && all_from(info, "tcp") > 0 && info->ep_attr->type == FI_EP_MSG);
	fi_freeinfo(info);
	free(hints->fabric_attr->prov_name);
	hints->fabric_attr->prov_name = strdup("efa");
	info = (void *) 1;
	ret = fi_getinfo(FI_VERSION(1, 5), NULL, NULL, 0, hints, &info);
	CHECK("prov_name efa is -FI_ENODATA and NULLs the output", ret == -FI_ENODATA && info == NULL);
	ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, NULL);
	CHECK("NULL output pointer is -FI_EINVAL", ret == -FI_EINVAL);
	ret = fi_getinfo(FI_VERSION(2, 0), NULL, NULL, 0, NULL, &info);
	CHECK("API version 2.0 is refused", ret < 0);

	/* Debian's fi_info sets every mode bit and every mr_mode bit but the legacy ones. */
	struct fi_info *wide = fi_allocinfo();
	wide->mode = ~0ULL;
	wide->domain_attr->mode = ~0ULL;
	wide->domain_attr->mr_mode = ~(FI_MR_BASIC | FI_MR_SCALABLE);
	wide->fabric_attr->prov_name = strdup("shm");
	ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, wide, &info);
	CHECK("hints with all mode and mr_mode bits set", ret == 0 && all_from(info, "shm") > 0);
	fi_freeinfo(info);
	fi_freeinfo(wide);
	ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, FI_PROV_ATTR_ONLY, NULL, &info);
	int provs = 0, pshm = 0, ptcp = 0;
	for (struct fi_info *i = info; ret == 0 && i; i = i->next, provs++) {
		pshm += !strcmp(i->fabric_attr->prov_name, "shm");
		ptcp += !strcmp(i->fabric_attr->prov_name, "tcp");
		if (i->caps || i->ep_attr->type || i->domain_attr->name || i->fabric_attr->prov_version == 0)
			pshm = -100;
	}
	CHECK("FI_PROV_ATTR_ONLY gives one bare offer per provider", ret == 0 && pshm == 1 && ptcp == 1);
	fi_freeinfo(info);

	/* The application's own strings in hints: dupinfo copies, freeinfo frees both. */
	free(hints->fabric_attr->prov_name);
	hints->fabric_attr->prov_name = strdup("shm");
	hints->fabric_attr->name = strdup("my fabric");
	hints->domain_attr->name = strdup("my domain");
	hints->src_addr = strdup("fi_shm://x");
	hints->src_addrlen = strlen("fi_shm://x") + 1;
	hints->addr_format = FI_ADDR_STR;
	hints->caps = FI_MSG | FI_TAGGED;
	hints->ep_attr->auth_key = malloc(4);
	memcpy(hints->ep_attr->auth_key, "key", 4);
	hints->ep_attr->auth_key_size = 4;
	dup = fi_dupinfo(hints);
	CHECK("dupinfo copies deeply",
	      dup && dup != hints && dup->next == NULL && dup->caps == hints->caps &&
	      dup->fabric_attr != hints->fabric_attr && !strcmp(dup->fabric_attr->name, "my fabric") &&
	      dup->fabric_attr->name != hints->fabric_attr->name &&
	      !strcmp(dup->domain_attr->name, "my domain") && dup->domain_attr->name != hints->domain_attr->name &&
	      dup->src_addr != hints->src_addr && !strcmp(dup->src_addr, "fi_shm://x") &&
	      dup->ep_attr->auth_key != hints->ep_attr->auth_key && dup->ep_attr->auth_key_size == 4 &&
	      !memcmp(dup->ep_attr->auth_key, "key", 4));
	fi_freeinfo(hints);
	fi_freeinfo(dup);
	fi_freeinfo(NULL);
	CHECK("freeinfo of both and of NULL returns", 1);

	CHECK("strerror of FI_ENODATA", !strcmp(fi_strerror(FI_ENODATA), "No data available"));
	CHECK("strerror of FI_ETRUNC", !strcmp(fi_strerror(FI_ETRUNC), "Truncation error"));
	struct fid *opened;
	CHECK("fi_open of mr_cache is -FI_ENOSYS",
	      fi_open(FI_VERSION(1, 17), "mr_cache", NULL, 0, 0, &opened, NULL) == -FI_ENOSYS);

	/* Parameters and logging, as an external provider uses them. */
	struct fi_provider prov = { .version = FI_VERSION(1, 0), .fi_version = FI_VERSION(1, 17), .name = "capitest" };
	CHECK("param_define int", fi_param_define(&prov, "knob", FI_PARAM_INT, "an int") == 0);
	CHECK("param_define bool", fi_param_define(&prov, "flag", FI_PARAM_BOOL, "a bool") == 0);
	CHECK("param_define string", fi_param_define(&prov, "label", FI_PARAM_STRING, "a string") == 0);
	CHECK("param_define size_t with a help format",
	      fi_param_define(&prov, "bytes", FI_PARAM_SIZE_T, "size in %s, default %d (%.1f)", "bytes", 42, 2.5) == 0);
	CHECK("param_define without help is -FI_EINVAL", fi_param_define(&prov, "nohelp", FI_PARAM_INT, "") == -FI_EINVAL);
	int iv = -1, bv = -1;
	char *sv = NULL;
	size_t zv = 0;
	CHECK("param_get int", fi_param_get_int(&prov, "knob", &iv) == 0 && iv == -17);
	CHECK("param_get bool", fi_param_get_bool(&prov, "flag", &bv) == 0 && bv == 1);
	CHECK("param_get string", fi_param_get_str(&prov, "label", &sv) == 0 && sv && !strcmp(sv, "hello"));
	CHECK("param_get size_t", fi_param_get_size_t(&prov, "bytes", &zv) == 0 && zv == 0x40);
	CHECK("param_get of an unset parameter is -FI_ENODATA", fi_param_define(&prov, "unsetknob", FI_PARAM_INT, "x") == 0 &&
	      fi_param_get_int(&prov, "unsetknob", &iv) == -FI_ENODATA);
	CHECK("param_get of an undefined parameter is -FI_ENOENT", fi_param_get_int(&prov, "nosuch", &iv) == -FI_ENOENT);
	CHECK("param_get of a bad bool is -FI_EINVAL", fi_param_define(&prov, "badflag", FI_PARAM_BOOL, "b") == 0 &&
	      fi_param_get_bool(&prov, "badflag", &bv) == -FI_EINVAL);
	struct fi_param *params;
	int count = 0, found_help = 0, found_core = 0, found_value = 0;
	CHECK("getparams", fi_getparams(&params, &count) == 0 && count > 0);
	for (int k = 0; k < count; k++) {
		if (!strcmp(params[k].name, "FI_CAPITEST_BYTES"))
			found_help = !strcmp(params[k].help_string, "size in bytes, default 42 (2.5)") &&
				     params[k].type == FI_PARAM_SIZE_T && params[k].value && !strcmp(params[k].value, "0x40");
		if (!strcmp(params[k].name, "FI_PROVIDER"))
			found_core = 1;
		if (!strcmp(params[k].name, "FI_CAPITEST_KNOB"))
			found_value = params[k].value && !strcmp(params[k].value, "-17");
	}
	CHECK("getparams lists a defined parameter with its formatted help and value", found_help);
	CHECK("getparams lists FI_PROVIDER", found_core);
	CHECK("getparams gives current values", found_value);
	fi_freeparams(params);

	CHECK("log enabled at info (FI_LOG_LEVEL=info)", fi_log_enabled(&prov, FI_LOG_INFO, FI_LOG_CORE) == 1);
	CHECK("log disabled at debug", fi_log_enabled(&prov, FI_LOG_DEBUG, FI_LOG_CORE) == 0);
	uint64_t showtime = 0;
	CHECK("log_ready once", fi_log_ready(&prov, FI_LOG_WARN, FI_LOG_CQ, &showtime) == 1 &&
	      fi_log_ready(&prov, FI_LOG_WARN, FI_LOG_CQ, &showtime) == 0);
	fi_log(&prov, FI_LOG_WARN, FI_LOG_EP_DATA, "capi_func", 77, "logged %d %s %.2f %ld\n", 7, "seven", 7.25, 70000000000L);
	CHECK("fi_log returns", 1);

	/* FABRIC_1.0 entry points with 1.0 layouts. */
	struct tx_attr_1_0 tx = { 0 };
	struct fi_rx_attr rx = { 0 };
	struct ep_attr_1_0 ep = { .type = FI_EP_RDM };
	struct domain_attr_1_0 dom = { 0 };
	struct fabric_attr_1_0 fab = { .prov_name = "shm" };
	struct info_1_0 old = { .caps = FI_MSG, .tx_attr = &tx, .rx_attr = &rx, .ep_attr = &ep, .domain_attr = &dom, .fabric_attr = &fab };
	struct info_1_0 *oldlist = NULL;
	ret = getinfo_1_0(FI_VERSION(1, 0), NULL, NULL, 0, &old, &oldlist);
	CHECK("fi_getinfo@FABRIC_1.0 with 1.0 hints", ret == 0 && oldlist && !strcmp(oldlist->fabric_attr->prov_name, "shm") &&
	      oldlist->ep_attr->type == FI_EP_RDM && (oldlist->caps & FI_MSG));
	struct fid_fabric *fabric = NULL;
	ret = oldlist ? fabric_1_0(oldlist->fabric_attr, &fabric, NULL) : -1;
	CHECK("fi_fabric@FABRIC_1.0 opens an API 1.0 fabric", ret == 0 && fabric && fabric->api_version == FI_VERSION(1, 0));
	if (fabric)
		CHECK("close of that fabric", fi_close(&fabric->fid) == 0);
	freeinfo_1_0(oldlist);
	dom.name = "dom";
	struct info_1_0 *olddup = dupinfo_1_0(&old);
	CHECK("fi_dupinfo@FABRIC_1.0 copies a 1.0 info", olddup && olddup->domain_attr->name != dom.name &&
	      !strcmp(olddup->domain_attr->name, "dom") && !strcmp(olddup->fabric_attr->prov_name, "shm") &&
	      olddup->ep_attr->type == FI_EP_RDM);
	freeinfo_1_0(olddup);
	CHECK("fi_dupinfo@FABRIC_1.0 of NULL allocates", (olddup = dupinfo_1_0(NULL)) && olddup->fabric_attr);
	freeinfo_1_0(olddup);

	/* FABRIC_1.1 and 1.2 entry points: a 1.1 info is a 1.2 info without nic. */
	struct tx_attr_1_0 tx11 = { 0 };
	struct fi_rx_attr rx11 = { 0 };
	struct fi_ep_attr ep11 = { .type = FI_EP_MSG };
	struct domain_attr_1_1 dom11 = { .name = "eth-like", .mr_mode = FI_MR_LOCAL };
	struct fi_fabric_attr fab11 = { .prov_name = "tcp" };
	struct info_1_2 h11 = { .caps = FI_MSG, .tx_attr = &tx11, .rx_attr = &rx11, .ep_attr = &ep11, .domain_attr = &dom11, .fabric_attr = &fab11 };
	struct info_1_2 *l11 = NULL;
	dom11.name = NULL;
	ret = getinfo_1_1(FI_VERSION(1, 5), NULL, NULL, 0, &h11, &l11);
	CHECK("fi_getinfo@FABRIC_1.1 with 1.1 hints", ret == 0 && l11 && !strcmp(l11->fabric_attr->prov_name, "tcp") &&
	      l11->ep_attr->type == FI_EP_MSG);
	freeinfo_1_2(l11);
	l11 = NULL;
	ret = getinfo_1_2(FI_VERSION(1, 9), NULL, NULL, 0, &h11, &l11);
	CHECK("fi_getinfo@FABRIC_1.2 with 1.2 hints", ret == 0 && l11 && !strcmp(l11->fabric_attr->prov_name, "tcp"));
	freeinfo_1_2(l11);
	dom11.name = "copied";
	struct info_1_2 *d11 = dupinfo_1_1(&h11), *d12 = dupinfo_1_2(&h11);
	CHECK("fi_dupinfo@FABRIC_1.1 and 1.2 copy deeply", d11 && d12 && d11->domain_attr->name != dom11.name &&
	      !strcmp(d11->domain_attr->name, "copied") && !strcmp(d12->domain_attr->name, "copied") &&
	      d12->domain_attr->mr_mode == FI_MR_LOCAL && !strcmp(d12->fabric_attr->prov_name, "tcp"));
	freeinfo_1_2(d11);
	freeinfo_1_2(d12);

	/* NULL arguments are errors, never crashes. */
	CHECK("fi_tostr of NULL data", !strcmp(fi_tostr(NULL, FI_TYPE_INFO), "(null)"));
	CHECK("fi_getparams with NULL outputs", fi_getparams(NULL, &count) == -FI_EINVAL && fi_getparams(&params, NULL) == -FI_EINVAL);
	fi_freeparams(NULL);
	CHECK("fi_param_get with NULL name or value", fi_param_get(&prov, NULL, &iv) == -FI_EINVAL &&
	      fi_param_get(&prov, "knob", NULL) == -FI_EINVAL);
	CHECK("fi_param_define with NULL name or help", fi_param_define(&prov, NULL, FI_PARAM_INT, "h") == -FI_EINVAL &&
	      fi_param_define(&prov, "x", FI_PARAM_INT, NULL) == -FI_EINVAL);
	CHECK("fi_open with NULL name or output", fi_open(FI_VERSION(1, 17), NULL, NULL, 0, 0, &opened, NULL) == -FI_EINVAL &&
	      fi_open(FI_VERSION(1, 17), "x", NULL, 0, 0, NULL, NULL) == -FI_EINVAL);
	CHECK("fi_fabric@FABRIC_1.0 with a NULL attribute", fabric_1_0(NULL, &fabric, NULL) == -FI_EINVAL);
	CHECK("fi_getinfo@FABRIC_1.0 with a NULL output", getinfo_1_0(FI_VERSION(1, 0), NULL, NULL, 0, NULL, NULL) == -FI_EINVAL);
	fi_log(NULL, FI_LOG_WARN, FI_LOG_CORE, NULL, 0, NULL);
	CHECK("fi_log with NULL provider, function and format", fi_log_ready(NULL, FI_LOG_WARN, FI_LOG_CORE, NULL) == 1);

	printf("%s\n", failures ? "FAILED" : "ALL OK");
	return failures ? 1 : 0;
}
