/*
 * abi: calls every exported function of libibverbs.so.1 (rdma-core 44's
 * IBVERBS_1.x ABI) on softhca's drop-in library, with good and bad
 * arguments, and checks what comes back against what rdma-core documents
 * (its man pages, and its source where they are silent).
 *
 * Build:  gcc -Wall -Werror -o abi abi.c -libverbs
 * Run:    LD_LIBRARY_PATH=<dir of softhca's libibverbs.so.1> \
 *         SOFTHCA_ADDR=127.0.0.1 ./abi
 *
 * Output is TAP: one "ok N - ..." or "not ok N - ..." line per check,
 * "# ..." diagnostics, the plan at the end. The exit status is 0 only if
 * every check passed. The run bails out at once if the first device is not
 * softhca0, i.e. the program did not bind softhca's library.
 *
 * Everything runs on one device: the data tests connect two QPs of it to
 * each other through GID 1 (the IPv4-mapped address).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <infiniband/verbs.h>
#include <infiniband/tm_types.h>
#include <infiniband/sa.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_sa.h>

/*
 * Exported IBVERBS_1.0/1.1 functions that rdma-core declares only in its
 * uninstalled headers (libibverbs/driver.h and marshall.h).
 */
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf,
			size_t size);
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst,
				struct ib_uverbs_qp_attr *src);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst,
				struct ib_uverbs_ah_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst,
				 struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst,
			       struct ibv_sa_path_rec *src);

#define PORT 1
#define GID_INDEX 1		/* the IPv4-mapped GID */
#define TIMEOUT_MS 5000		/* for a completion or an event */
#define QKEY 0x11111111
#define GRH_LEN 40		/* what a UD receive buffer starts with */
#define BUF_SIZE 4096

/* ------------------------------------------------------------------ TAP */

static int ntests, nfailed;

static bool vreport(bool ok, const char *todo, const char *fmt, va_list ap)
{
	ntests++;
	if (!ok && !todo)
		nfailed++;
	printf("%sok %d - ", ok ? "" : "not ", ntests);
	vprintf(fmt, ap);
	if (todo)
		printf(" # TODO %s", todo);
	putchar('\n');
	return ok;
}

static void diag(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("# ", stdout);
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
}

static bool check(bool ok, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(ok, NULL, fmt, ap);
	va_end(ap);
	return ok;
}

/* A known deviation that is not a failure of the run (TAP TODO). */
static bool check_todo(bool ok, const char *why, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(ok, why, fmt, ap);
	va_end(ap);
	return ok;
}

static const char *errname(int e)
{
	const char *n;

	if (e == 0)
		return "0";
	n = strerrorname_np(e < 0 ? -e : e);
	return n ? n : "unknown errno";
}

/* An integer result: got must be want. */
static bool check_int(long long got, long long want, const char *fmt, ...)
{
	va_list ap;
	bool ok = got == want;

	va_start(ap, fmt);
	vreport(ok, NULL, fmt, ap);
	va_end(ap);
	if (!ok)
		diag("  got %lld, want %lld", got, want);
	return ok;
}

/* A verb that returns 0 or an errno value. */
static bool check_ret(int ret, int want, const char *fmt, ...)
{
	va_list ap;
	bool ok = ret == want;

	va_start(ap, fmt);
	vreport(ok, NULL, fmt, ap);
	va_end(ap);
	if (!ok)
		diag("  got %d (%s), want %d (%s)", ret, errname(ret), want,
		     errname(want));
	return ok;
}

/* A verb that must have failed (NULL, -1, ...) with errno want. */
static bool check_fail(bool failed, int err, int want, const char *fmt, ...)
{
	va_list ap;
	bool ok = failed && err == want;

	va_start(ap, fmt);
	vreport(ok, NULL, fmt, ap);
	va_end(ap);
	if (!ok)
		diag("  got %s with errno %s, want failure with errno %s",
		     failed ? "failure" : "success", errname(err),
		     errname(want));
	return ok;
}

static bool check_str(const char *got, const char *want, const char *fmt, ...)
{
	va_list ap;
	bool ok = got && strcmp(got, want) == 0;

	va_start(ap, fmt);
	vreport(ok, NULL, fmt, ap);
	va_end(ap);
	if (!ok)
		diag("  got \"%s\", want \"%s\"", got ? got : "(null)", want);
	return ok;
}

/* ------------------------------------------------------------- helpers */

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* Polls cq until n completions arrived or TIMEOUT_MS passed: how many. */
static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	long long end = now_ms() + TIMEOUT_MS;
	int got = 0;

	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		if (r < 0)
			return r;
		got += r;
		if (got < n && now_ms() > end)
			break;
	}
	return got;
}

/* Polls one completion and checks it: successful, wr_id, opcode. */
static bool expect_wc(struct ibv_cq *cq, struct ibv_wc *wc, uint64_t wr_id,
		      enum ibv_wc_opcode opcode, const char *what)
{
	int n;

	memset(wc, 0, sizeof(*wc));
	n = poll_n(cq, wc, 1);
	if (n != 1) {
		check(false, "%s: a completion arrives", what);
		diag("  ibv_poll_cq gave %d completions in %d ms", n,
		     TIMEOUT_MS);
		return false;
	}
	if (!check(wc->status == IBV_WC_SUCCESS && wc->wr_id == wr_id &&
			   wc->opcode == opcode,
		   "%s: completion wr_id %#" PRIx64 ", %s, opcode %d", what,
		   wr_id, ibv_wc_status_str(IBV_WC_SUCCESS), opcode)) {
		diag("  got wr_id %#" PRIx64 ", status %d (%s), opcode %d",
		     wc->wr_id, wc->status, ibv_wc_status_str(wc->status),
		     wc->opcode);
		return false;
	}
	return true;
}

static bool cq_empty(struct ibv_cq *cq)
{
	struct ibv_wc wc;

	return ibv_poll_cq(cq, 1, &wc) == 0;
}

static bool gid_is_v4mapped(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = { [10] = 0xff, [11] = 0xff };

	return memcmp(g->raw, prefix, sizeof(prefix)) == 0;
}

static const char *gid_str(const union ibv_gid *g, char *buf, size_t len)
{
	return inet_ntop(AF_INET6, g->raw, buf, len);
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* ------------------------------------------------------------ the run */

struct env {
	struct ibv_context *ctx;
	struct ibv_device *dev;
	struct ibv_pd *pd;
	struct ibv_device_attr dattr;
	struct ibv_port_attr pattr;
	union ibv_gid gid;
	__be64 guid;
};

/* ibv_wc_status_str, ibv_node_type_str, ibv_port_state_str,
 * ibv_event_type_str: rdma-core's enum_strs.c. */
static void test_strings(void)
{
	check_str(ibv_wc_status_str(IBV_WC_SUCCESS), "success",
		  "ibv_wc_status_str(IBV_WC_SUCCESS)");
	check_str(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR),
		  "Work Request Flushed Error",
		  "ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR)");
	check_str(ibv_wc_status_str(IBV_WC_TM_RNDV_INCOMPLETE),
		  "TM software rendezvous",
		  "ibv_wc_status_str(IBV_WC_TM_RNDV_INCOMPLETE)");
	check_str(ibv_wc_status_str((enum ibv_wc_status)1000), "unknown",
		  "ibv_wc_status_str(1000) is \"unknown\"");

	check_str(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter",
		  "ibv_node_type_str(IBV_NODE_CA)");
	check_str(ibv_node_type_str(IBV_NODE_UNSPECIFIED), "unspecified",
		  "ibv_node_type_str(IBV_NODE_UNSPECIFIED)");
	check_str(ibv_node_type_str(IBV_NODE_UNKNOWN), "unknown",
		  "ibv_node_type_str(IBV_NODE_UNKNOWN) is \"unknown\"");
	check_str(ibv_node_type_str((enum ibv_node_type)1000), "unknown",
		  "ibv_node_type_str(1000) is \"unknown\"");

	check_str(ibv_port_state_str(IBV_PORT_NOP), "no state change (NOP)",
		  "ibv_port_state_str(IBV_PORT_NOP)");
	check_str(ibv_port_state_str(IBV_PORT_DOWN), "down",
		  "ibv_port_state_str(IBV_PORT_DOWN)");
	check_str(ibv_port_state_str(IBV_PORT_ACTIVE), "active",
		  "ibv_port_state_str(IBV_PORT_ACTIVE)");
	check_str(ibv_port_state_str(IBV_PORT_ACTIVE_DEFER), "active defer",
		  "ibv_port_state_str(IBV_PORT_ACTIVE_DEFER)");
	check_str(ibv_port_state_str((enum ibv_port_state)1000), "unknown",
		  "ibv_port_state_str(1000) is \"unknown\"");

	check_str(ibv_event_type_str(IBV_EVENT_CQ_ERR), "CQ error",
		  "ibv_event_type_str(IBV_EVENT_CQ_ERR)");
	check_str(ibv_event_type_str(IBV_EVENT_SRQ_LIMIT_REACHED),
		  "SRQ limit reached",
		  "ibv_event_type_str(IBV_EVENT_SRQ_LIMIT_REACHED)");
	check_str(ibv_event_type_str(IBV_EVENT_WQ_FATAL), "WQ fatal",
		  "ibv_event_type_str(IBV_EVENT_WQ_FATAL)");
	check_str(ibv_event_type_str((enum ibv_event_type)(IBV_EVENT_WQ_FATAL + 1)),
		  "unknown", "ibv_event_type_str(IBV_EVENT_WQ_FATAL + 1) is \"unknown\"");
	check_str(ibv_event_type_str((enum ibv_event_type)-1), "unknown",
		  "ibv_event_type_str(-1) is \"unknown\"");
}

/* ibv_rate_to_mult, mult_to_ibv_rate, ibv_rate_to_mbps, mbps_to_ibv_rate:
 * rdma-core 44's tables (verbs.c). A rate that is no whole multiple of
 * 2.5 Gb/s has no multiplier. */
static void test_rates(void)
{
	static const struct {
		enum ibv_rate rate;
		int mult;	/* -1: none */
		int mbps;
	} t[] = {
		{ IBV_RATE_2_5_GBPS, 1, 2500 },	   { IBV_RATE_5_GBPS, 2, 5000 },
		{ IBV_RATE_10_GBPS, 4, 10000 },	   { IBV_RATE_20_GBPS, 8, 20000 },
		{ IBV_RATE_30_GBPS, 12, 30000 },   { IBV_RATE_40_GBPS, 16, 40000 },
		{ IBV_RATE_60_GBPS, 24, 60000 },   { IBV_RATE_80_GBPS, 32, 80000 },
		{ IBV_RATE_120_GBPS, 48, 120000 }, { IBV_RATE_14_GBPS, -1, 14062 },
		{ IBV_RATE_56_GBPS, -1, 56250 },   { IBV_RATE_112_GBPS, -1, 112500 },
		{ IBV_RATE_168_GBPS, -1, 168750 }, { IBV_RATE_25_GBPS, -1, 25781 },
		{ IBV_RATE_100_GBPS, -1, 103125 }, { IBV_RATE_200_GBPS, -1, 206250 },
		{ IBV_RATE_300_GBPS, -1, 309375 }, { IBV_RATE_28_GBPS, 11, 28125 },
		{ IBV_RATE_50_GBPS, 20, 53125 },   { IBV_RATE_400_GBPS, 160, 425000 },
		{ IBV_RATE_600_GBPS, 240, 637500 },
		{ IBV_RATE_800_GBPS, 320, 850000 },
		{ IBV_RATE_1200_GBPS, 480, 1275000 },
	};
	size_t i;
	int bad_mult = 0, bad_mbps = 0, bad_rev = 0;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		int m = ibv_rate_to_mult(t[i].rate);
		int b = ibv_rate_to_mbps(t[i].rate);

		if (m != t[i].mult) {
			diag("  ibv_rate_to_mult(%d) = %d, want %d", t[i].rate,
			     m, t[i].mult);
			bad_mult++;
		}
		if (b != t[i].mbps) {
			diag("  ibv_rate_to_mbps(%d) = %d, want %d", t[i].rate,
			     b, t[i].mbps);
			bad_mbps++;
		}
		if (mbps_to_ibv_rate(t[i].mbps) != t[i].rate) {
			diag("  mbps_to_ibv_rate(%d) = %d, want %d", t[i].mbps,
			     mbps_to_ibv_rate(t[i].mbps), t[i].rate);
			bad_rev++;
		}
		if (t[i].mult > 0 && mult_to_ibv_rate(t[i].mult) != t[i].rate) {
			diag("  mult_to_ibv_rate(%d) = %d, want %d", t[i].mult,
			     mult_to_ibv_rate(t[i].mult), t[i].rate);
			bad_rev++;
		}
	}
	check(bad_mult == 0,
	      "ibv_rate_to_mult: every rate as rdma-core 44 (-1 for no whole multiple)");
	check(bad_mbps == 0, "ibv_rate_to_mbps: every rate as rdma-core 44");
	check(bad_rev == 0,
	      "mbps_to_ibv_rate and mult_to_ibv_rate invert them");
	check_int(mult_to_ibv_rate(5), IBV_RATE_MAX,
		  "mult_to_ibv_rate(5) is IBV_RATE_MAX (14 Gb/s has no multiplier)");
	check_int(mult_to_ibv_rate(3), IBV_RATE_MAX,
		  "mult_to_ibv_rate(3) is IBV_RATE_MAX");
	check_int(ibv_rate_to_mult(IBV_RATE_MAX), -1,
		  "ibv_rate_to_mult(IBV_RATE_MAX) is -1");
	check_int(ibv_rate_to_mbps(IBV_RATE_MAX), -1,
		  "ibv_rate_to_mbps(IBV_RATE_MAX) is -1");
	check_int(mbps_to_ibv_rate(1234), IBV_RATE_MAX,
		  "mbps_to_ibv_rate(1234) is IBV_RATE_MAX");
}

/* ibv_fork_init, ibv_is_fork_initialized, ibv_dontfork_range,
 * ibv_dofork_range: before any memory registration. A kernel that copies
 * DMA pages on fork makes rdma-core answer IBV_FORK_UNNEEDED. */
static void test_fork(void)
{
	enum ibv_fork_status st;
	void *page;

	st = ibv_is_fork_initialized();
	check(st == IBV_FORK_DISABLED || st == IBV_FORK_UNNEEDED,
	      "ibv_is_fork_initialized before ibv_fork_init: DISABLED or UNNEEDED (got %d)",
	      st);
	check_ret(ibv_fork_init(), 0, "ibv_fork_init before any registration");
	st = ibv_is_fork_initialized();
	check(st == IBV_FORK_ENABLED || st == IBV_FORK_UNNEEDED,
	      "ibv_is_fork_initialized after ibv_fork_init: ENABLED or UNNEEDED (got %d)",
	      st);
	check_ret(ibv_fork_init(), 0, "ibv_fork_init a second time");

	if (posix_memalign(&page, 4096, 2 * 4096)) {
		check(false, "posix_memalign");
		return;
	}
	check_ret(ibv_dontfork_range(page, 2 * 4096), 0, "ibv_dontfork_range");
	check_ret(ibv_dofork_range(page, 2 * 4096), 0, "ibv_dofork_range");
	check_ret(ibv_dontfork_range(NULL, 0), 0,
		  "ibv_dontfork_range(NULL, 0) is a no-op");
	free(page);
}

static bool write_file(const char *path, const char *data)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return false;
	fputs(data, f);
	return fclose(f) == 0;
}

/* ibv_get_sysfs_path, ibv_read_sysfs_file (rdma-core's sysfs.c). */
static void test_sysfs(bool sysfs_env_set)
{
	char dir[] = "/tmp/abi-sysfs-XXXXXX", path[64], buf[16];
	const char *p = ibv_get_sysfs_path();
	int n;

	check(p != NULL, "ibv_get_sysfs_path returns a path");
	/* main set SYSFS_PATH to "/sys//": rdma-core strips trailing '/' */
	if (sysfs_env_set)
		check_str(p, "/sys", "ibv_get_sysfs_path strips SYSFS_PATH's trailing '/'");

	if (!mkdtemp(dir)) {
		check(false, "mkdtemp for the sysfs files");
		return;
	}
	snprintf(path, sizeof(path), "%s/val", dir);
	write_file(path, "0x1234\n");
	memset(buf, 'z', sizeof(buf));
	n = ibv_read_sysfs_file(dir, "val", buf, sizeof(buf));
	check(n == 6 && strcmp(buf, "0x1234") == 0,
	      "ibv_read_sysfs_file reads \"0x1234\\n\" as 6 bytes \"0x1234\" (got %d)", n);
	snprintf(path, sizeof(path), "%s/long", dir);
	write_file(path, "abcdefgh");
	n = ibv_read_sysfs_file(dir, "long", buf, 4);
	check_int(n, -1,
		  "ibv_read_sysfs_file of a file longer than the buffer (no newline) is -1");
	check_int(ibv_read_sysfs_file(dir, "missing", buf, sizeof(buf)), -1,
		  "ibv_read_sysfs_file of a missing file is -1");
	unlink(path);
	snprintf(path, sizeof(path), "%s/val", dir);
	unlink(path);
	rmdir(dir);
}

/* The device list and the device's names. Returns false (bail out) if the
 * program is not on softhca's library. */
static bool test_device_list(struct env *e)
{
	struct ibv_device **list, **list2;
	const char *name;
	Dl_info info;
	void *sym;
	int n = -1;

	sym = dlsym(RTLD_DEFAULT, "ibv_open_device");
	if (sym && dladdr(sym, &info) && info.dli_fname)
		printf("# library: %s\n", info.dli_fname);

	list = ibv_get_device_list(&n);
	if (!check(list != NULL, "ibv_get_device_list returns a list")) {
		diag("  errno %s", errname(errno));
		return false;
	}
	check(n >= 1, "ibv_get_device_list counts %d device(s), at least one", n);
	check(n >= 0 && list[n] == NULL,
	      "the list is NULL-terminated after num_devices entries");
	name = list[0] ? ibv_get_device_name(list[0]) : NULL;
	printf("# device: %s\n", name ? name : "(none)");
	if (!check_str(name, "softhca0", "the first device is softhca0")) {
		printf("Bail out! not softhca's libibverbs.so.1\n");
		ibv_free_device_list(list);
		return false;
	}
	e->dev = list[0];
	check(e->dev->node_type == IBV_NODE_CA,
	      "the device is a channel adapter (node_type %d)", e->dev->node_type);
	e->guid = ibv_get_device_guid(e->dev);
	check(e->guid != 0, "ibv_get_device_guid is not zero (%#" PRIx64 ")",
	      (uint64_t)be64toh(e->guid));
	n = ibv_get_device_index(e->dev);
	check(n >= 0, "ibv_get_device_index is an index (%d)", n);

	list2 = ibv_get_device_list(NULL);
	check(list2 && list2[0] == e->dev,
	      "ibv_get_device_list(NULL) is allowed and lists the same device");
	if (list2)
		ibv_free_device_list(list2);

	e->ctx = ibv_open_device(e->dev);
	if (!check(e->ctx != NULL, "ibv_open_device")) {
		diag("  errno %s", errname(errno));
		ibv_free_device_list(list);
		return false;
	}
	/* rdma-core: open the devices, then the list may go */
	ibv_free_device_list(list);
	check(e->ctx->device == e->dev, "the context's device is the listed device");
	return true;
}

static void test_open_close(struct env *e)
{
	struct ibv_context *c2;
	struct ibv_device_attr a;
	struct ibv_async_event ev;
	int r;

	c2 = ibv_open_device(e->dev);
	check(c2 != NULL, "a second ibv_open_device of the device");
	if (c2)
		check_ret(ibv_close_device(c2), 0, "ibv_close_device of the second context");
	check_ret(ibv_query_device(e->ctx, &a), 0,
		  "the first context still works after the second closed");

	check(e->ctx->async_fd >= 0 && fcntl(e->ctx->async_fd, F_GETFD) >= 0,
	      "the context's async_fd is an open file descriptor");
	check_int(set_nonblock(e->ctx->async_fd), 0, "async_fd takes O_NONBLOCK");
	errno = 0;
	r = ibv_get_async_event(e->ctx, &ev);
	check_fail(r == -1, errno, EAGAIN,
		   "ibv_get_async_event on a non-blocking async_fd with no event: -1, EAGAIN");
}

static void test_query(struct env *e)
{
	struct ibv_device_attr_ex ax;
	struct ibv_port_attr pc;
	struct ibv_gid_entry ge, *table;
	union ibv_gid g;
	__be16 pkey;
	char s[INET6_ADDRSTRLEN];
	ssize_t n;
	size_t i;
	int r, empty = -1, ok;

	check_ret(ibv_query_device(e->ctx, &e->dattr), 0, "ibv_query_device");
	check_int(e->dattr.phys_port_cnt, 1, "the device has one port");
	check(e->dattr.node_guid == e->guid,
	      "ibv_query_device's node_guid is ibv_get_device_guid's");
	check(e->dattr.max_qp > 0 && e->dattr.max_cq > 0 && e->dattr.max_cqe > 0 &&
		      e->dattr.max_mr > 0 && e->dattr.max_pd > 0 &&
		      e->dattr.max_qp_wr > 0 && e->dattr.max_sge > 0,
	      "ibv_query_device reports limits (max_qp %d, max_cqe %d, max_qp_wr %d)",
	      e->dattr.max_qp, e->dattr.max_cqe, e->dattr.max_qp_wr);

	memset(&ax, 0xab, sizeof(ax));
	r = ibv_query_device_ex(e->ctx, NULL, &ax);
	check_ret(r, 0, "ibv_query_device_ex");
	check(ax.orig_attr.node_guid == e->guid &&
		      ax.orig_attr.max_qp == e->dattr.max_qp,
	      "ibv_query_device_ex's orig_attr is ibv_query_device's");
	check_int(ax.tm_caps.max_num_tags, 1024, "tm_caps.max_num_tags is 1024");
	check(ax.tm_caps.flags & IBV_TM_CAP_RC, "tm_caps.flags has IBV_TM_CAP_RC");

	/* the inline ibv_query_port: the extended path (query_port op) */
	r = ibv_query_port(e->ctx, PORT, &e->pattr);
	check_ret(r, 0, "ibv_query_port (verbs.h inline, extended path)");
	check_int(e->pattr.state, IBV_PORT_ACTIVE, "port 1 is ACTIVE");
	check_int(e->pattr.link_layer, IBV_LINK_LAYER_ETHERNET,
		  "port 1's link layer is Ethernet (RoCE)");
	check(e->pattr.gid_tbl_len > GID_INDEX,
	      "port 1's GID table holds index %d (gid_tbl_len %d)", GID_INDEX,
	      e->pattr.gid_tbl_len);
	check(e->pattr.active_mtu >= IBV_MTU_1024 && e->pattr.pkey_tbl_len >= 1,
	      "port 1: active_mtu >= 1024 (%d), a P_Key table (%d)",
	      e->pattr.active_mtu, e->pattr.pkey_tbl_len);
	check_str(ibv_port_state_str(e->pattr.state), "active",
		  "ibv_port_state_str of port 1's state");

	/* the exported symbol itself: old binaries' struct stops at flags */
	memset(&pc, 0xab, sizeof(pc));
	r = (ibv_query_port)(e->ctx, PORT, (struct _compat_ibv_port_attr *)&pc);
	check_ret(r, 0, "ibv_query_port (the exported symbol, compat struct)");
	check(pc.state == e->pattr.state && pc.gid_tbl_len == e->pattr.gid_tbl_len &&
		      pc.active_mtu == e->pattr.active_mtu &&
		      pc.link_layer == e->pattr.link_layer,
	      "both ibv_query_port paths agree");
	ok = 1;
	for (i = offsetof(struct ibv_port_attr, port_cap_flags2); i < sizeof(pc); i++)
		if (((unsigned char *)&pc)[i] != 0xab)
			ok = 0;
	check(ok, "the exported ibv_query_port writes nothing past struct _compat_ibv_port_attr");

	check(ibv_query_port(e->ctx, 0, &pc) != 0, "ibv_query_port of port 0 fails");
	check_ret(ibv_query_port(e->ctx, 2, &pc), EINVAL, "ibv_query_port of port 2: EINVAL");
	check((ibv_query_port)(e->ctx, 2, (struct _compat_ibv_port_attr *)&pc) != 0,
	      "the exported ibv_query_port of port 2 fails");

	r = ibv_query_gid(e->ctx, PORT, GID_INDEX, &e->gid);
	check_ret(r, 0, "ibv_query_gid(port 1, index %d)", GID_INDEX);
	diag("gid[%d] = %s", GID_INDEX, gid_str(&e->gid, s, sizeof(s)));
	check(gid_is_v4mapped(&e->gid), "GID %d is IPv4-mapped", GID_INDEX);
	check_int(ibv_query_gid(e->ctx, PORT, e->pattr.gid_tbl_len, &g), -1,
		  "ibv_query_gid of index gid_tbl_len is -1");
	check_int(ibv_query_gid(e->ctx, PORT, -1, &g), -1,
		  "ibv_query_gid of index -1 is -1");
	check_int(ibv_query_gid(e->ctx, 2, GID_INDEX, &g), -1,
		  "ibv_query_gid of port 2 is -1");
	check_int(ibv_query_gid(e->ctx, 0, GID_INDEX, &g), -1,
		  "ibv_query_gid of port 0 is -1");

	memset(&ge, 0, sizeof(ge));
	r = ibv_query_gid_ex(e->ctx, PORT, GID_INDEX, &ge, 0);
	check_ret(r, 0, "ibv_query_gid_ex(port 1, index %d)", GID_INDEX);
	check(memcmp(&ge.gid, &e->gid, sizeof(ge.gid)) == 0 &&
		      ge.gid_index == GID_INDEX && ge.port_num == PORT,
	      "ibv_query_gid_ex's entry is ibv_query_gid's GID, index and port");
	check_int(ge.gid_type, IBV_GID_TYPE_ROCE_V2, "GID %d is a RoCEv2 GID", GID_INDEX);
	r = ibv_query_gid_ex(e->ctx, PORT, e->pattr.gid_tbl_len, &ge, 0);
	check(r != 0, "ibv_query_gid_ex of index gid_tbl_len fails (%s)", errname(r));
	r = ibv_query_gid_ex(e->ctx, 2, GID_INDEX, &ge, 0);
	check(r != 0, "ibv_query_gid_ex of port 2 fails (%s)", errname(r));
	for (i = 0; i < (size_t)e->pattr.gid_tbl_len && empty < 0; i++) {
		static const union ibv_gid zero;

		if (!ibv_query_gid(e->ctx, PORT, i, &g) && !memcmp(&g, &zero, sizeof(g)))
			empty = i;
	}
	if (empty >= 0)
		check_ret(ibv_query_gid_ex(e->ctx, PORT, empty, &ge, 0), ENODATA,
			  "ibv_query_gid_ex of the empty entry %d: ENODATA", empty);

	table = calloc(e->pattr.gid_tbl_len, sizeof(*table));
	n = table ? ibv_query_gid_table(e->ctx, table, e->pattr.gid_tbl_len, 0) : -ENOMEM;
	check(n >= 1 && n <= e->pattr.gid_tbl_len,
	      "ibv_query_gid_table returns the valid entries (%zd)", n);
	ok = 0;
	for (i = 0; n > 0 && i < (size_t)n; i++)
		if (table[i].gid_index == GID_INDEX && table[i].port_num == PORT &&
		    !memcmp(&table[i].gid, &e->gid, sizeof(e->gid)))
			ok = 1;
	check(ok, "ibv_query_gid_table holds GID %d", GID_INDEX);
	free(table);

	r = ibv_query_pkey(e->ctx, PORT, 0, &pkey);
	check(r == 0 && pkey == htobe16(0xffff),
	      "ibv_query_pkey(port 1, index 0) is the default P_Key 0xffff (ret %d, %#x)",
	      r, be16toh(pkey));
	check_int(ibv_query_pkey(e->ctx, PORT, e->pattr.pkey_tbl_len, &pkey), -1,
		  "ibv_query_pkey of index pkey_tbl_len is -1");
	check_int(ibv_query_pkey(e->ctx, 2, 0, &pkey), -1, "ibv_query_pkey of port 2 is -1");
	check_int(ibv_get_pkey_index(e->ctx, PORT, htobe16(0xffff)), 0,
		  "ibv_get_pkey_index(0xffff) is 0");
	check_int(ibv_get_pkey_index(e->ctx, PORT, htobe16(0x1234)), -1,
		  "ibv_get_pkey_index of a P_Key not in the table is -1");
	check_int(ibv_get_pkey_index(e->ctx, 2, htobe16(0xffff)), -1,
		  "ibv_get_pkey_index on port 2 is -1");
}

/* PD and MR. */
static void test_pd_mr(struct env *e)
{
	const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		       IBV_ACCESS_REMOTE_READ;
	struct ibv_pd *pd2;
	struct ibv_mr *mr, *mr2;
	char *buf;
	int r;

	e->pd = ibv_alloc_pd(e->ctx);
	if (!check(e->pd != NULL, "ibv_alloc_pd"))
		return;
	check(e->pd->context == e->ctx, "the PD's context");

	buf = aligned_alloc(4096, BUF_SIZE);
	mr = ibv_reg_mr(e->pd, buf, BUF_SIZE, rw);
	if (check(mr != NULL, "ibv_reg_mr")) {
		check(mr->addr == buf && mr->length == BUF_SIZE && mr->pd == e->pd &&
			      mr->context == e->ctx,
		      "the MR's addr, length, pd and context");
		r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				 IBV_ACCESS_LOCAL_WRITE);
		check(r != 0, "ibv_rereg_mr(CHANGE_ACCESS) fails (%d, errno %s)", r,
		      errname(errno));
		errno = 0;
		r = ibv_rereg_mr(mr, 0x80, NULL, NULL, 0, 0);
		check_fail(r == IBV_REREG_MR_ERR_INPUT, errno, EINVAL,
			   "ibv_rereg_mr with an unknown flag: IBV_REREG_MR_ERR_INPUT, EINVAL");
		check_ret(ibv_dereg_mr(mr), 0, "ibv_dereg_mr");
	}

	errno = 0;
	mr = ibv_reg_mr(e->pd, buf, BUF_SIZE, IBV_ACCESS_REMOTE_WRITE);
	check_fail(!mr, errno, EINVAL, "ibv_reg_mr(REMOTE_WRITE without LOCAL_WRITE): EINVAL");
	if (mr)
		ibv_dereg_mr(mr);
	errno = 0;
	mr = ibv_reg_mr(e->pd, buf, BUF_SIZE, IBV_ACCESS_REMOTE_ATOMIC);
	check_fail(!mr, errno, EINVAL, "ibv_reg_mr(REMOTE_ATOMIC without LOCAL_WRITE): EINVAL");
	if (mr)
		ibv_dereg_mr(mr);

	/* an optional access bit goes through ibv_reg_mr_iova2; may be ignored */
	mr = ibv_reg_mr(e->pd, buf, BUF_SIZE,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	check(mr != NULL, "ibv_reg_mr with IBV_ACCESS_RELAXED_ORDERING (optional)");
	if (mr)
		ibv_dereg_mr(mr);

	errno = 0;
	mr = ibv_reg_mr_iova(e->pd, buf, BUF_SIZE, 0x10000, IBV_ACCESS_LOCAL_WRITE);
	check_fail(!mr, errno, EOPNOTSUPP, "ibv_reg_mr_iova with iova != addr: EOPNOTSUPP");
	if (mr)
		ibv_dereg_mr(mr);
	mr = ibv_reg_mr_iova(e->pd, buf, BUF_SIZE, (uintptr_t)buf, IBV_ACCESS_LOCAL_WRITE);
	if (check(mr != NULL, "ibv_reg_mr_iova with iova == addr"))
		ibv_dereg_mr(mr);
	mr = ibv_reg_mr_iova2(e->pd, buf, BUF_SIZE, (uintptr_t)buf, rw);
	if (check(mr != NULL, "ibv_reg_mr_iova2 with iova == addr")) {
		check(mr->lkey != 0 || mr->rkey != 0, "the MR has keys");
		check_ret(ibv_dereg_mr(mr), 0, "ibv_dereg_mr of the iova2 MR");
	}
	errno = 0;
	mr = ibv_reg_dmabuf_mr(e->pd, 0, BUF_SIZE, 0, -1, IBV_ACCESS_LOCAL_WRITE);
	check_fail(!mr, errno, EOPNOTSUPP, "ibv_reg_dmabuf_mr: EOPNOTSUPP");
	{
		/* Memory that is not mapped cannot be registered: the kernel
		 * fails to pin it (EFAULT); softhca checks it is mapped, so
		 * that a later WRITE into it is not a crash. */
		void *gone = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (gone != MAP_FAILED && munmap(gone, 2 * 4096) == 0) {
			errno = 0;
			mr = ibv_reg_mr(e->pd, gone, 2 * 4096, IBV_ACCESS_LOCAL_WRITE);
			check_fail(!mr, errno, EFAULT, "ibv_reg_mr of unmapped memory: EFAULT");
			if (mr)
				ibv_dereg_mr(mr);
		}
	}
	if (mr)
		ibv_dereg_mr(mr);

	/* a PD with a live MR cannot go */
	pd2 = ibv_alloc_pd(e->ctx);
	if (!check(pd2 != NULL, "ibv_alloc_pd of a second PD"))
		goto out;
	mr2 = ibv_reg_mr(pd2, buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
	check(mr2 != NULL, "ibv_reg_mr on the second PD");
	if (mr2) {
		check_ret(ibv_dealloc_pd(pd2), EBUSY,
			  "ibv_dealloc_pd of a PD with a live MR: EBUSY");
		check_ret(ibv_dereg_mr(mr2), 0, "ibv_dereg_mr of the MR");
	}
	check_ret(ibv_dealloc_pd(pd2), 0, "ibv_dealloc_pd once the MR is gone");
out:
	free(buf);
}

/* Completion channel and CQ. */
static void test_cq(struct env *e)
{
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_cq_ex *cqx;
	struct ibv_cq_init_attr_ex ca;
	struct ibv_poll_cq_attr pa = {};
	struct pollfd pfd;
	int r;

	ch = ibv_create_comp_channel(e->ctx);
	if (!check(ch != NULL, "ibv_create_comp_channel"))
		return;
	check(ch->fd >= 0 && fcntl(ch->fd, F_GETFD) >= 0,
	      "the channel's fd is an open file descriptor");
	pfd = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	check_int(poll(&pfd, 1, 0), 0, "poll() sees no event on a new channel");

	cq = ibv_create_cq(e->ctx, 16, NULL, ch, 0);
	if (check(cq != NULL, "ibv_create_cq on the channel")) {
		check(cq->cqe >= 16 && cq->channel == ch && cq->context == e->ctx,
		      "the CQ's cqe (%d), channel and context", cq->cqe);
		check_ret(ibv_destroy_comp_channel(ch), EBUSY,
			  "ibv_destroy_comp_channel while a CQ uses it: EBUSY");
		check_ret(ibv_resize_cq(cq, 100), 0, "ibv_resize_cq to 100");
		check(cq->cqe >= 100, "the resized CQ has cqe >= 100 (%d)", cq->cqe);
		if (e->dattr.max_cqe < 0x7fffffff)
			check_ret(ibv_resize_cq(cq, e->dattr.max_cqe + 1), EINVAL,
				  "ibv_resize_cq beyond max_cqe: EINVAL");
		check_ret(ibv_req_notify_cq(cq, 0), 0, "ibv_req_notify_cq");
		check_ret(ibv_req_notify_cq(cq, 1), 0, "ibv_req_notify_cq(solicited only)");
		check_ret(ibv_destroy_cq(cq), 0, "ibv_destroy_cq");
	}
	check_ret(ibv_destroy_comp_channel(ch), 0, "ibv_destroy_comp_channel");

	errno = 0;
	cq = ibv_create_cq(e->ctx, 0, NULL, NULL, 0);
	check_fail(!cq, errno, EINVAL, "ibv_create_cq with cqe 0: EINVAL");
	if (cq)
		ibv_destroy_cq(cq);
	if (e->dattr.max_cqe < 0x7fffffff) {
		errno = 0;
		cq = ibv_create_cq(e->ctx, e->dattr.max_cqe + 1, NULL, NULL, 0);
		check_fail(!cq, errno, EINVAL, "ibv_create_cq with cqe > max_cqe: EINVAL");
		if (cq)
			ibv_destroy_cq(cq);
	}

	memset(&ca, 0, sizeof(ca));
	ca.cqe = 8;
	ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
		      IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP;
	cqx = ibv_create_cq_ex(e->ctx, &ca);
	if (check(cqx != NULL, "ibv_create_cq_ex with wc_flags")) {
		r = ibv_start_poll(cqx, &pa);
		check_ret(r, ENOENT, "ibv_start_poll on an empty CQ: ENOENT");
		if (r == 0)
			ibv_end_poll(cqx);
		check_ret(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0,
			  "ibv_destroy_cq of the extended CQ");
	}
}

/* SRQ: basic, tag matching, XRC. */
static void test_srq(struct env *e)
{
	struct ibv_srq_init_attr si = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq_init_attr_ex sx;
	struct ibv_srq_attr sa;
	struct ibv_srq *srq;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_recv_wr rwr, *bad;
	struct ibv_ops_wr ops[2], *obad;
	struct ibv_sge sge;
	struct ibv_wc wc[2];
	char *buf;
	int r, n;

	srq = ibv_create_srq(e->pd, &si);
	if (!check(srq != NULL, "ibv_create_srq"))
		return;
	check(si.attr.max_wr >= 16 && si.attr.max_sge >= 1,
	      "ibv_create_srq returns the SRQ's max_wr (%u) and max_sge (%u)",
	      si.attr.max_wr, si.attr.max_sge);
	check(srq->context == e->ctx && srq->pd == e->pd, "the SRQ's context and pd");
	memset(&sa, 0, sizeof(sa));
	check_ret(ibv_query_srq(srq, &sa), 0, "ibv_query_srq");
	check(sa.max_wr >= 16 && sa.srq_limit == 0,
	      "ibv_query_srq: max_wr %u, srq_limit %u", sa.max_wr, sa.srq_limit);
	sa.srq_limit = 4;
	check_ret(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT), 0, "ibv_modify_srq(IBV_SRQ_LIMIT 4)");
	memset(&sa, 0, sizeof(sa));
	ibv_query_srq(srq, &sa);
	check_int(sa.srq_limit, 4, "ibv_query_srq shows srq_limit 4");
	sa.srq_limit = e->dattr.max_srq_wr + 1;
	check_ret(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT), EINVAL,
		  "ibv_modify_srq with srq_limit > max_wr: EINVAL");
	if (e->dattr.device_cap_flags & IBV_DEVICE_SRQ_RESIZE) {
		sa.max_wr = 32;
		check_ret(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR), 0,
			  "ibv_modify_srq(IBV_SRQ_MAX_WR 32) (IBV_DEVICE_SRQ_RESIZE)");
	}

	buf = aligned_alloc(4096, BUF_SIZE);
	mr = ibv_reg_mr(e->pd, buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
	sge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = 64, .lkey = mr ? mr->lkey : 0 };
	rwr = (struct ibv_recv_wr){ .wr_id = 1, .sg_list = &sge, .num_sge = 1 };
	check_ret(ibv_post_srq_recv(srq, &rwr, &bad), 0, "ibv_post_srq_recv");
	check_ret(ibv_destroy_srq(srq), 0, "ibv_destroy_srq");

	/* tag matching */
	cq = ibv_create_cq(e->ctx, 16, NULL, NULL, 0);
	memset(&sx, 0, sizeof(sx));
	sx.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
		       IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
	sx.srq_type = IBV_SRQT_TM;
	sx.pd = e->pd;
	sx.cq = cq;
	sx.attr.max_wr = 16;
	sx.attr.max_sge = 1;
	sx.tm_cap.max_num_tags = 16;
	sx.tm_cap.max_ops = 8;
	srq = cq ? ibv_create_srq_ex(e->ctx, &sx) : NULL;
	if (check(srq != NULL, "ibv_create_srq_ex(IBV_SRQT_TM)")) {
		memset(ops, 0, sizeof(ops));
		for (n = 0; n < 2; n++) {
			ops[n].wr_id = 0x100 + n;
			ops[n].next = n == 0 ? &ops[1] : NULL;
			ops[n].opcode = IBV_WR_TAG_ADD;
			ops[n].flags = IBV_OPS_SIGNALED;
			ops[n].tm.handle = 0xdeadbeef;
			ops[n].tm.add.recv_wr_id = 0x200 + n;
			ops[n].tm.add.sg_list = &sge;
			ops[n].tm.add.num_sge = 1;
			ops[n].tm.add.tag = 0x1000 + n;
			ops[n].tm.add.mask = ~0ULL;
		}
		r = ibv_post_srq_ops(srq, ops, &obad);
		check_ret(r, 0, "ibv_post_srq_ops: two IBV_WR_TAG_ADD in one list");
		check(ops[0].tm.handle != 0xdeadbeef && ops[1].tm.handle != 0xdeadbeef &&
			      ops[0].tm.handle != ops[1].tm.handle,
		      "TAG_ADD returns a handle for each entry (%u, %u)",
		      ops[0].tm.handle, ops[1].tm.handle);
		n = poll_n(cq, wc, 2);
		check(n == 2 && wc[0].opcode == IBV_WC_TM_ADD && wc[0].status == IBV_WC_SUCCESS &&
			      wc[0].wr_id == 0x100 && wc[1].opcode == IBV_WC_TM_ADD &&
			      wc[1].wr_id == 0x101,
		      "signaled TAG_ADDs complete as IBV_WC_TM_ADD with their wr_id");
		memset(&ops[0], 0, sizeof(ops[0]));
		ops[0].wr_id = 0x102;
		ops[0].opcode = IBV_WR_TAG_DEL;
		ops[0].flags = IBV_OPS_SIGNALED;
		ops[0].tm.handle = ops[1].tm.handle;
		check_ret(ibv_post_srq_ops(srq, &ops[0], &obad), 0,
			  "ibv_post_srq_ops: IBV_WR_TAG_DEL of a handle");
		n = poll_n(cq, wc, 1);
		check(n == 1 && wc[0].opcode == IBV_WC_TM_DEL && wc[0].status == IBV_WC_SUCCESS &&
			      wc[0].wr_id == 0x102,
		      "the signaled TAG_DEL completes as IBV_WC_TM_DEL");
		check_ret(ibv_destroy_srq(srq), 0, "ibv_destroy_srq of the TM SRQ");
	}

	/* XRC: no XRC domains here */
	memset(&sx, 0, sizeof(sx));
	sx.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
		       IBV_SRQ_INIT_ATTR_CQ;
	sx.srq_type = IBV_SRQT_XRC;
	sx.pd = e->pd;
	sx.cq = cq;
	sx.attr.max_wr = 16;
	sx.attr.max_sge = 1;
	errno = 0;
	srq = cq ? ibv_create_srq_ex(e->ctx, &sx) : NULL;
	check(!srq && errno != 0, "ibv_create_srq_ex(IBV_SRQT_XRC) fails (errno %s)",
	      errname(errno));
	if (srq)
		ibv_destroy_srq(srq);
	if (cq)
		ibv_destroy_cq(cq);
	if (mr)
		ibv_dereg_mr(mr);
	free(buf);
}

/* ------------------------------------------------------------- QP state */

static int qp_to_init(struct ibv_qp *qp, int access)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = PORT,
		.qp_access_flags = access,
		.qkey = QKEY,
	};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	mask |= qp->qp_type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	return ibv_modify_qp(qp, &a, mask);
}

static int qp_to_rtr(struct ibv_qp *qp, uint32_t dest, const union ibv_gid *dgid)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = dest,
		.rq_psn = 0x100,
		.max_dest_rd_atomic = 4,
		.min_rnr_timer = 12,
		.ah_attr = {
			.is_global = 1,
			.grh = { .dgid = *dgid, .sgid_index = GID_INDEX, .hop_limit = 64 },
			.port_num = PORT,
		},
	};

	if (qp->qp_type == IBV_QPT_UD)
		return ibv_modify_qp(qp, &a, IBV_QP_STATE);
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					     IBV_QP_MAX_DEST_RD_ATOMIC |
					     IBV_QP_MIN_RNR_TIMER);
}

static int qp_to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTS,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
		.sq_psn = 0x100,
		.max_rd_atomic = 4,
	};

	if (qp->qp_type == IBV_QPT_UD)
		return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
					     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* ------------------------------------------------------------- RC data */

#define RC_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* Offsets in the two buffers. */
enum { OFF_SEND = 0, OFF_WRITE = 512, OFF_READ = 1024, OFF_ATOMIC = 2048,
       OFF_WR = 2560, OFF_LIST = 3072 };

struct rc {
	struct env *e;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq_a;		/* A's send and receive CQ, on ch */
	struct ibv_cq_ex *cqx_b;	/* B's, an extended CQ */
	struct ibv_cq *cq_b;
	struct ibv_qp *qa;		/* ibv_create_qp_ex with send_ops_flags */
	struct ibv_qp *qb;		/* ibv_create_qp */
	char *buf_a, *buf_b;
	struct ibv_mr *mr_a, *mr_b;
	int cq_cookie;
};

static int post_recv_b(struct rc *rc, uint64_t wr_id, size_t off, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)rc->buf_b + off, len, rc->mr_b->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	return ibv_post_recv(rc->qb, &wr, &bad);
}

static int post_send_a(struct rc *rc, struct ibv_send_wr *wr, size_t off, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)rc->buf_a + off, len, rc->mr_a->lkey };
	struct ibv_send_wr *bad;

	wr->sg_list = &sge;
	wr->num_sge = 1;
	wr->send_flags |= IBV_SEND_SIGNALED;
	return ibv_post_send(rc->qa, wr, &bad);
}

static bool rc_setup(struct rc *rc)
{
	struct env *e = rc->e;
	struct ibv_qp_init_attr_ex ax;
	struct ibv_qp_init_attr ib;
	struct ibv_cq_init_attr_ex ca;
	struct ibv_qp_attr qa;
	struct ibv_recv_wr rwr = { .wr_id = 7 }, *rbad = NULL;
	struct ibv_send_wr swr = { .wr_id = 8, .opcode = IBV_WR_SEND }, *sbad = NULL;
	int r;

	rc->buf_a = aligned_alloc(4096, BUF_SIZE);
	rc->buf_b = aligned_alloc(4096, BUF_SIZE);
	memset(rc->buf_a, 0, BUF_SIZE);
	memset(rc->buf_b, 0, BUF_SIZE);
	rc->mr_a = ibv_reg_mr(e->pd, rc->buf_a, BUF_SIZE, RC_ACCESS);
	rc->mr_b = ibv_reg_mr(e->pd, rc->buf_b, BUF_SIZE, RC_ACCESS);
	if (!check(rc->mr_a && rc->mr_b, "ibv_reg_mr of the RC buffers (remote read, write, atomic)"))
		return false;
	rc->ch = ibv_create_comp_channel(e->ctx);
	rc->cq_a = rc->ch ? ibv_create_cq(e->ctx, 64, &rc->cq_cookie, rc->ch, 0) : NULL;
	memset(&ca, 0, sizeof(ca));
	ca.cqe = 64;
	ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM;
	rc->cqx_b = ibv_create_cq_ex(e->ctx, &ca);
	rc->cq_b = rc->cqx_b ? ibv_cq_ex_to_cq(rc->cqx_b) : NULL;
	if (!check(rc->cq_a && rc->cq_b, "the RC CQs (one on a channel, one extended)"))
		return false;

	memset(&ax, 0, sizeof(ax));
	ax.qp_type = IBV_QPT_RC;
	ax.send_cq = ax.recv_cq = rc->cq_a;
	ax.cap = (struct ibv_qp_cap){ 32, 32, 2, 2, 64 };
	ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ax.pd = e->pd;
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
			    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
			    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	rc->qa = ibv_create_qp_ex(e->ctx, &ax);
	if (!check(rc->qa != NULL, "ibv_create_qp_ex(RC, send_ops_flags)")) {
		diag("  errno %s", errname(errno));
		return false;
	}
	check(ibv_qp_to_qp_ex(rc->qa) != NULL,
	      "ibv_qp_to_qp_ex of a QP created with send_ops_flags is not NULL");
	check(ax.cap.max_inline_data >= 64, "the QP got max_inline_data %u >= 64",
	      ax.cap.max_inline_data);

	memset(&ib, 0, sizeof(ib));
	ib.qp_type = IBV_QPT_RC;
	ib.send_cq = ib.recv_cq = rc->cq_b;
	ib.cap = (struct ibv_qp_cap){ 32, 32, 2, 2, 64 };
	ib.qp_context = rc;
	rc->qb = ibv_create_qp(e->pd, &ib);
	if (!check(rc->qb != NULL, "ibv_create_qp(RC)"))
		return false;
	check(rc->qb->qp_num != 0 && rc->qb->qp_num != rc->qa->qp_num &&
		      rc->qb->qp_type == IBV_QPT_RC && rc->qb->state == IBV_QPS_RESET &&
		      rc->qb->pd == e->pd && rc->qb->send_cq == rc->cq_b &&
		      rc->qb->qp_context == rc && rc->qb->context == e->ctx,
	      "the QP's qp_num (%#x), type, state RESET, pd, CQs, qp_context",
	      rc->qb->qp_num);
	check(ib.cap.max_send_wr >= 32 && ib.cap.max_recv_wr >= 32,
	      "ibv_create_qp returns the capacities it gave (send %u, recv %u)",
	      ib.cap.max_send_wr, ib.cap.max_recv_wr);
	check(ibv_qp_to_qp_ex(rc->qb) == NULL,
	      "ibv_qp_to_qp_ex of a QP made with ibv_create_qp is NULL");

	/* RESET: no posting */
	r = ibv_post_recv(rc->qb, &rwr, &rbad);
	check(r == EINVAL && rbad == &rwr,
	      "ibv_post_recv in RESET: EINVAL, bad_wr is the request (ret %d)", r);
	r = ibv_post_send(rc->qa, &swr, &sbad);
	check(r == EINVAL && sbad == &swr,
	      "ibv_post_send in RESET: EINVAL, bad_wr is the request (ret %d)", r);

	/* bad transitions */
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_RTS;
	qa.timeout = 14;
	qa.retry_cnt = 7;
	qa.rnr_retry = 7;
	qa.max_rd_atomic = 1;
	check_ret(ibv_modify_qp(rc->qa, &qa,
				IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					IBV_QP_MAX_QP_RD_ATOMIC),
		  EINVAL, "ibv_modify_qp RESET->RTS: EINVAL");
	check_int(rc->qa->state, IBV_QPS_RESET, "the QP stays in RESET");
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_INIT;
	check_ret(ibv_modify_qp(rc->qa, &qa, IBV_QP_STATE), EINVAL,
		  "ibv_modify_qp RESET->INIT without port, pkey, access: EINVAL");

	check_ret(qp_to_init(rc->qa, RC_ACCESS), 0, "ibv_modify_qp RESET->INIT");
	check_int(rc->qa->state, IBV_QPS_INIT, "qp->state follows: INIT");
	r = ibv_post_send(rc->qa, &swr, &sbad);
	check(r != 0 && sbad == &swr,
	      "ibv_post_send in INIT fails, bad_wr is the request (%s)", errname(r));
	check_ret(qp_to_init(rc->qb, RC_ACCESS), 0, "RESET->INIT of the second QP");
	check_ret(qp_to_rtr(rc->qa, rc->qb->qp_num, &e->gid), 0,
		  "ibv_modify_qp INIT->RTR (GRH to GID %d, path_mtu 1024)", GID_INDEX);
	check_ret(qp_to_rtr(rc->qb, rc->qa->qp_num, &e->gid), 0,
		  "INIT->RTR of the second QP");
	check_ret(qp_to_rts(rc->qa), 0, "ibv_modify_qp RTR->RTS");
	check_int(rc->qa->state, IBV_QPS_RTS, "qp->state follows: RTS");
	return check_ret(qp_to_rts(rc->qb), 0, "RTR->RTS of the second QP");
}

static void rc_query(struct rc *rc)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int r;

	memset(&a, 0, sizeof(a));
	memset(&ia, 0, sizeof(ia));
	r = ibv_query_qp(rc->qa, &a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					     IBV_QP_AV | IBV_QP_CAP,
			 &ia);
	check_ret(r, 0, "ibv_query_qp");
	check(a.qp_state == IBV_QPS_RTS && a.path_mtu == IBV_MTU_1024 &&
		      a.dest_qp_num == rc->qb->qp_num,
	      "ibv_query_qp: RTS, path_mtu 1024, dest_qp_num (got %d, %d, %#x)",
	      a.qp_state, a.path_mtu, a.dest_qp_num);
	check(a.ah_attr.is_global && a.ah_attr.grh.sgid_index == GID_INDEX &&
		      !memcmp(&a.ah_attr.grh.dgid, &rc->e->gid, sizeof(rc->e->gid)),
	      "ibv_query_qp: the path's GRH");
	check(ia.qp_type == IBV_QPT_RC && ia.send_cq == rc->cq_a &&
		      ia.recv_cq == rc->cq_a && ia.cap.max_send_wr >= 32,
	      "ibv_query_qp: init_attr's type, CQs and capacities");

	r = ibv_query_qp_data_in_order(rc->qa, IBV_WR_RDMA_WRITE, 0);
	check(r == 0 || r == 1, "ibv_query_qp_data_in_order is 0 or 1 (%d)", r);

	{
		struct ibv_ece ece;

		memset(&ece, 0, sizeof(ece));
		check_ret(ibv_query_ece(rc->qa, &ece), EOPNOTSUPP, "ibv_query_ece: EOPNOTSUPP");
		ece.vendor_id = 0x15b3;
		check_ret(ibv_set_ece(rc->qa, &ece), EOPNOTSUPP, "ibv_set_ece: EOPNOTSUPP");
	}
}

static void rc_send(struct rc *rc)
{
	static const char msg[] = "hello, softhca";
	struct ibv_send_wr wr;
	struct ibv_wc wc;

	strcpy(rc->buf_a + OFF_SEND, msg);
	check_ret(post_recv_b(rc, 0xb1, OFF_SEND, 256), 0, "ibv_post_recv");
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 0xa1;
	wr.opcode = IBV_WR_SEND;
	check_ret(post_send_a(rc, &wr, OFF_SEND, sizeof(msg)), 0, "ibv_post_send(SEND)");
	expect_wc(rc->cq_a, &wc, 0xa1, IBV_WC_SEND, "SEND");
	if (expect_wc(rc->cq_b, &wc, 0xb1, IBV_WC_RECV, "RECV")) {
		check(wc.byte_len == sizeof(msg) && wc.qp_num == rc->qb->qp_num &&
			      !(wc.wc_flags & IBV_WC_WITH_IMM),
		      "RECV: byte_len %u, qp_num, no immediate", wc.byte_len);
		check(memcmp(rc->buf_b + OFF_SEND, msg, sizeof(msg)) == 0,
		      "RECV: the data arrived");
	}
}

/* SEND_WITH_IMM, read with the extended CQ API. */
static void rc_send_imm(struct rc *rc)
{
	struct ibv_poll_cq_attr pa = {};
	struct ibv_send_wr wr;
	struct ibv_wc wc;
	long long end;
	int r;

	check_ret(post_recv_b(rc, 0xb2, OFF_SEND, 256), 0, "ibv_post_recv for SEND_WITH_IMM");
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 0xa2;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.imm_data = htonl(0x12345678);
	check_ret(post_send_a(rc, &wr, OFF_SEND, 16), 0, "ibv_post_send(SEND_WITH_IMM)");
	expect_wc(rc->cq_a, &wc, 0xa2, IBV_WC_SEND, "SEND_WITH_IMM");

	end = now_ms() + TIMEOUT_MS;
	while ((r = ibv_start_poll(rc->cqx_b, &pa)) == ENOENT && now_ms() < end)
		;
	if (!check_ret(r, 0, "ibv_start_poll returns the completion"))
		return;
	check(rc->cqx_b->status == IBV_WC_SUCCESS && rc->cqx_b->wr_id == 0xb2,
	      "ibv_start_poll: status and wr_id in the CQ (%d, %#" PRIx64 ")",
	      rc->cqx_b->status, rc->cqx_b->wr_id);
	check_int(ibv_wc_read_opcode(rc->cqx_b), IBV_WC_RECV, "ibv_wc_read_opcode is IBV_WC_RECV");
	check_int(ibv_wc_read_byte_len(rc->cqx_b), 16, "ibv_wc_read_byte_len");
	check(ibv_wc_read_wc_flags(rc->cqx_b) & IBV_WC_WITH_IMM,
	      "ibv_wc_read_wc_flags has IBV_WC_WITH_IMM");
	check(ibv_wc_read_imm_data(rc->cqx_b) == htonl(0x12345678),
	      "ibv_wc_read_imm_data is the immediate in network order (%#x)",
	      ibv_wc_read_imm_data(rc->cqx_b));
	check_int(ibv_wc_read_qp_num(rc->cqx_b), rc->qb->qp_num, "ibv_wc_read_qp_num");
	check_ret(ibv_next_poll(rc->cqx_b), ENOENT, "ibv_next_poll: ENOENT, no more");
	ibv_end_poll(rc->cqx_b);

	/* the same through ibv_poll_cq */
	check_ret(post_recv_b(rc, 0xb3, OFF_SEND, 256), 0, "ibv_post_recv for a second SEND_WITH_IMM");
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 0xa3;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.imm_data = htonl(0xcafe0001);
	post_send_a(rc, &wr, OFF_SEND, 8);
	expect_wc(rc->cq_a, &wc, 0xa3, IBV_WC_SEND, "SEND_WITH_IMM");
	if (expect_wc(rc->cq_b, &wc, 0xb3, IBV_WC_RECV, "RECV with immediate"))
		check((wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(0xcafe0001),
		      "wc.imm_data is the immediate in network order with IBV_WC_WITH_IMM (%#x)",
		      wc.imm_data);
}

static void rc_rdma(struct rc *rc)
{
	struct ibv_send_wr wr;
	struct ibv_wc wc;
	uint64_t *remote = (uint64_t *)(rc->buf_b + OFF_ATOMIC);
	uint64_t *local = (uint64_t *)(rc->buf_a + OFF_ATOMIC);
	int i;

	for (i = 0; i < 256; i++)
		rc->buf_a[OFF_WRITE + i] = (char)i;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 0xa4;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = (uintptr_t)rc->buf_b + OFF_WRITE;
	wr.wr.rdma.rkey = rc->mr_b->rkey;
	check_ret(post_send_a(rc, &wr, OFF_WRITE, 256), 0, "ibv_post_send(RDMA_WRITE)");
	if (expect_wc(rc->cq_a, &wc, 0xa4, IBV_WC_RDMA_WRITE, "RDMA_WRITE"))
		check(memcmp(rc->buf_b + OFF_WRITE, rc->buf_a + OFF_WRITE, 256) == 0,
		      "RDMA_WRITE: the remote buffer holds the data");
	check(cq_empty(rc->cq_b), "RDMA_WRITE consumes no receive");

	for (i = 0; i < 256; i++)
		rc->buf_b[OFF_READ + i] = (char)(255 - i);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 0xa5;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = (uintptr_t)rc->buf_b + OFF_READ;
	wr.wr.rdma.rkey = rc->mr_b->rkey;
	check_ret(post_send_a(rc, &wr, OFF_READ, 256), 0, "ibv_post_send(RDMA_READ)");
	if (expect_wc(rc->cq_a, &wc, 0xa5, IBV_WC_RDMA_READ, "RDMA_READ"))
		check(memcmp(rc->buf_a + OFF_READ, rc->buf_b + OFF_READ, 256) == 0 &&
			      wc.byte_len == 256,
		      "RDMA_READ: the local buffer holds the remote data, byte_len 256");

	*remote = 10;
	*local = 0;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 0xa6;
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr.atomic.remote_addr = (uintptr_t)remote;
	wr.wr.atomic.rkey = rc->mr_b->rkey;
	wr.wr.atomic.compare_add = 5;
	check_ret(post_send_a(rc, &wr, OFF_ATOMIC, 8), 0, "ibv_post_send(ATOMIC_FETCH_AND_ADD 5)");
	if (expect_wc(rc->cq_a, &wc, 0xa6, IBV_WC_FETCH_ADD, "FETCH_AND_ADD"))
		check(*local == 10 && *remote == 15,
		      "FETCH_AND_ADD: returns 10, remote becomes 15 (got %" PRIu64 ", %" PRIu64 ")",
		      *local, *remote);

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 0xa7;
	wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr.wr.atomic.remote_addr = (uintptr_t)remote;
	wr.wr.atomic.rkey = rc->mr_b->rkey;
	wr.wr.atomic.compare_add = 15;
	wr.wr.atomic.swap = 100;
	check_ret(post_send_a(rc, &wr, OFF_ATOMIC, 8), 0, "ibv_post_send(ATOMIC_CMP_AND_SWP 15->100)");
	if (expect_wc(rc->cq_a, &wc, 0xa7, IBV_WC_COMP_SWAP, "CMP_AND_SWP"))
		check(*local == 15 && *remote == 100,
		      "CMP_AND_SWP (equal): returns 15, remote becomes 100 (got %" PRIu64 ", %" PRIu64 ")",
		      *local, *remote);
	wr.wr_id = 0xa8;
	wr.wr.atomic.compare_add = 1;
	wr.wr.atomic.swap = 2;
	post_send_a(rc, &wr, OFF_ATOMIC, 8);
	if (expect_wc(rc->cq_a, &wc, 0xa8, IBV_WC_COMP_SWAP, "CMP_AND_SWP (not equal)"))
		check(*local == 100 && *remote == 100,
		      "CMP_AND_SWP (not equal): returns 100, remote stays 100 (got %" PRIu64 ", %" PRIu64 ")",
		      *local, *remote);
}

/* IBV_SEND_INLINE from a stack buffer, reused as soon as the post returns. */
static void rc_inline(struct rc *rc)
{
	char msg[32] = "inline data";
	struct ibv_sge sge = { (uintptr_t)msg, sizeof(msg), 0 /* no lkey needed */ };
	struct ibv_send_wr wr = { .wr_id = 0xa9, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;
	struct ibv_wc wc;

	post_recv_b(rc, 0xb9, OFF_SEND, 256);
	check_ret(ibv_post_send(rc->qa, &wr, &bad), 0,
		  "ibv_post_send(SEND, IBV_SEND_INLINE) from a stack buffer");
	memset(msg, 'X', sizeof(msg));
	expect_wc(rc->cq_a, &wc, 0xa9, IBV_WC_SEND, "inline SEND");
	if (expect_wc(rc->cq_b, &wc, 0xb9, IBV_WC_RECV, "RECV of the inline SEND"))
		check(wc.byte_len == sizeof(msg) &&
			      strcmp(rc->buf_b + OFF_SEND, "inline data") == 0,
		      "the inline data arrived as it was at the post");
}

/* A list of two requests in one post, each side. */
static void rc_list(struct rc *rc)
{
	struct ibv_sge rs[2], ss[2];
	struct ibv_recv_wr rw[2], *rbad;
	struct ibv_send_wr sw[2], *sbad;
	struct ibv_wc wc[2];
	int i, n;

	for (i = 0; i < 2; i++) {
		rs[i] = (struct ibv_sge){ (uintptr_t)rc->buf_b + OFF_LIST + 64 * i, 64, rc->mr_b->lkey };
		rw[i] = (struct ibv_recv_wr){ .wr_id = 0xc0 + i, .next = i ? NULL : &rw[1],
					      .sg_list = &rs[i], .num_sge = 1 };
		snprintf(rc->buf_a + OFF_LIST + 64 * i, 64, "message %d", i);
		ss[i] = (struct ibv_sge){ (uintptr_t)rc->buf_a + OFF_LIST + 64 * i, 16, rc->mr_a->lkey };
		sw[i] = (struct ibv_send_wr){ .wr_id = 0xd0 + i, .next = i ? NULL : &sw[1],
					      .sg_list = &ss[i], .num_sge = 1,
					      .opcode = IBV_WR_SEND,
					      .send_flags = IBV_SEND_SIGNALED };
	}
	check_ret(ibv_post_recv(rc->qb, rw, &rbad), 0, "ibv_post_recv of a list of 2");
	check_ret(ibv_post_send(rc->qa, sw, &sbad), 0, "ibv_post_send of a list of 2");
	n = poll_n(rc->cq_a, wc, 2);
	check(n == 2 && wc[0].wr_id == 0xd0 && wc[1].wr_id == 0xd1 &&
		      wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS,
	      "both sends complete, in order");
	n = poll_n(rc->cq_b, wc, 2);
	check(n == 2 && wc[0].wr_id == 0xc0 && wc[1].wr_id == 0xc1 &&
		      wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS,
	      "both receives complete, in order");
	check(strcmp(rc->buf_b + OFF_LIST, "message 0") == 0 &&
		      strcmp(rc->buf_b + OFF_LIST + 64, "message 1") == 0,
	      "each receive holds its message");
}

/* The ibv_wr_* API of an extended QP. */
static void rc_wr_api(struct rc *rc)
{
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(rc->qa);
	char inl[16] = "wr inline";
	struct ibv_wc wc[2];
	int n;

	if (!qx)
		return;
	strcpy(rc->buf_a + OFF_WR, "wr send");
	post_recv_b(rc, 0xbe, OFF_WR, 64);
	ibv_wr_start(qx);
	qx->wr_id = 0xe1;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, rc->mr_a->lkey, (uintptr_t)rc->buf_a + OFF_WR, 8);
	qx->wr_id = 0xe2;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, rc->mr_b->rkey, (uintptr_t)rc->buf_b + OFF_WR + 256);
	ibv_wr_set_inline_data(qx, inl, sizeof(inl));
	memset(inl, 'X', sizeof(inl)); /* copied by set_inline_data */
	check_ret(ibv_wr_complete(qx), 0,
		  "ibv_wr_start, ibv_wr_send + ibv_wr_set_sge, ibv_wr_rdma_write + ibv_wr_set_inline_data, ibv_wr_complete");
	n = poll_n(rc->cq_a, wc, 2);
	check(n == 2 && wc[0].wr_id == 0xe1 && wc[0].opcode == IBV_WC_SEND &&
		      wc[1].wr_id == 0xe2 && wc[1].opcode == IBV_WC_RDMA_WRITE &&
		      wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS,
	      "the ibv_wr_* requests complete: SEND then RDMA_WRITE");
	n = poll_n(rc->cq_b, wc, 1);
	check(n == 1 && wc[0].wr_id == 0xbe && wc[0].byte_len == 8 &&
		      strcmp(rc->buf_b + OFF_WR, "wr send") == 0,
	      "ibv_wr_send's data arrived");
	check(strcmp(rc->buf_b + OFF_WR + 256, "wr inline") == 0,
	      "ibv_wr_rdma_write's inline data arrived");

	ibv_wr_start(qx);
	qx->wr_id = 0xe3;
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, rc->mr_a->lkey, (uintptr_t)rc->buf_a + OFF_WR, 8);
	ibv_wr_abort(qx);
	check(cq_empty(rc->cq_a) && cq_empty(rc->cq_b), "ibv_wr_abort posts nothing");
}

/* Completion events on the channel, and the channel's fd in poll(). */
static void rc_events(struct rc *rc)
{
	struct ibv_sge sge = { (uintptr_t)rc->buf_a + OFF_SEND, 64, rc->mr_a->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 0xaa, .sg_list = &sge, .num_sge = 1 }, *rbad;
	struct ibv_sge ssge = { (uintptr_t)rc->buf_b + OFF_SEND, 8, rc->mr_b->lkey };
	struct ibv_send_wr swr = { .wr_id = 0xba, .sg_list = &ssge, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *sbad;
	struct pollfd pfd = { .fd = rc->ch->fd, .events = POLLIN };
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	struct ibv_wc wc;
	int r;

	check_ret(ibv_destroy_comp_channel(rc->ch), EBUSY,
		  "ibv_destroy_comp_channel while a CQ uses it: EBUSY");
	check_ret(ibv_req_notify_cq(rc->cq_a, 0), 0, "ibv_req_notify_cq");
	check_int(set_nonblock(rc->ch->fd), 0, "the channel fd takes O_NONBLOCK");
	errno = 0;
	r = ibv_get_cq_event(rc->ch, &ev_cq, &ev_ctx);
	check_fail(r == -1, errno, EAGAIN,
		   "ibv_get_cq_event on a non-blocking channel with no event: -1, EAGAIN");

	ibv_post_recv(rc->qa, &rwr, &rbad);
	check_ret(ibv_post_send(rc->qb, &swr, &sbad), 0, "ibv_post_send from the second QP");
	r = poll(&pfd, 1, TIMEOUT_MS);
	check(r == 1 && (pfd.revents & POLLIN), "poll() sees POLLIN on the channel fd after a completion");
	r = ibv_get_cq_event(rc->ch, &ev_cq, &ev_ctx);
	check_ret(r, 0, "ibv_get_cq_event");
	check(ev_cq == rc->cq_a && ev_ctx == &rc->cq_cookie,
	      "the event names the CQ and its cq_context");
	if (r == 0)
		ibv_ack_cq_events(ev_cq, 1);
	expect_wc(rc->cq_a, &wc, 0xaa, IBV_WC_RECV, "RECV on the notified CQ");
	expect_wc(rc->cq_b, &wc, 0xba, IBV_WC_SEND, "SEND of the second QP");
	pfd.revents = 0;
	check_int(poll(&pfd, 1, 0), 0, "no further event until the CQ is armed again");
}

/* Destroy a third QP on A's CQ: A and its CQ go on undisturbed. */
static void rc_neighbour(struct rc *rc)
{
	struct ibv_qp_init_attr ia = { .send_cq = rc->cq_a, .recv_cq = rc->cq_a,
				       .cap = { 4, 4, 1, 1, 0 }, .qp_type = IBV_QPT_RC };
	struct ibv_sge sge = { (uintptr_t)rc->buf_a, 64, rc->mr_a->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 0xf0, .sg_list = &sge, .num_sge = 1 }, *bad;
	struct ibv_send_wr wr;
	struct ibv_wc wc;
	struct ibv_qp *qc;

	qc = ibv_create_qp(rc->e->pd, &ia);
	if (!check(qc != NULL, "ibv_create_qp of a third QP on the same CQ"))
		return;
	check_ret(ibv_destroy_cq(rc->cq_a), EBUSY, "ibv_destroy_cq of a CQ a QP uses: EBUSY");
	qp_to_init(qc, RC_ACCESS);
	check_ret(ibv_post_recv(qc, &rwr, &bad), 0, "ibv_post_recv on it in INIT");
	check_ret(ibv_destroy_qp(qc), 0, "ibv_destroy_qp of the third QP");
	check(cq_empty(rc->cq_a), "its posted receive leaves no completion on the shared CQ");

	post_recv_b(rc, 0xbf, OFF_SEND, 64);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 0xaf;
	wr.opcode = IBV_WR_SEND;
	check_ret(post_send_a(rc, &wr, OFF_SEND, 8), 0, "the neighbour QP still posts");
	expect_wc(rc->cq_a, &wc, 0xaf, IBV_WC_SEND, "the neighbour's SEND");
	expect_wc(rc->cq_b, &wc, 0xbf, IBV_WC_RECV, "the neighbour's RECV");
}

static void rc_teardown(struct rc *rc)
{
	if (rc->qa)
		check_ret(ibv_destroy_qp(rc->qa), 0, "ibv_destroy_qp of the extended QP");
	if (rc->qb)
		check_ret(ibv_destroy_qp(rc->qb), 0, "ibv_destroy_qp");
	if (rc->cq_a)
		check_ret(ibv_destroy_cq(rc->cq_a), 0, "ibv_destroy_cq once no QP uses it");
	if (rc->cq_b)
		check_ret(ibv_destroy_cq(rc->cq_b), 0, "ibv_destroy_cq of the extended CQ");
	if (rc->ch)
		check_ret(ibv_destroy_comp_channel(rc->ch), 0,
			  "ibv_destroy_comp_channel once no CQ uses it");
	if (rc->mr_a)
		ibv_dereg_mr(rc->mr_a);
	if (rc->mr_b)
		ibv_dereg_mr(rc->mr_b);
	free(rc->buf_a);
	free(rc->buf_b);
}

/* ------------------------------------------------------ tag matching data */

/* poll_tm takes one completion from an extended CQ, with its tag. */
static bool poll_tm(struct ibv_cq_ex *cq, struct ibv_wc *wc, struct ibv_wc_tm_info *tm)
{
	struct ibv_poll_cq_attr pa = {};
	long long end = now_ms() + 5000;
	int r;

	while ((r = ibv_start_poll(cq, &pa)) == ENOENT && now_ms() < end)
		;
	if (r)
		return false;
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = cq->wr_id;
	wc->status = cq->status;
	wc->opcode = ibv_wc_read_opcode(cq);
	wc->byte_len = ibv_wc_read_byte_len(cq);
	wc->wc_flags = ibv_wc_read_wc_flags(cq);
	memset(tm, 0, sizeof(*tm));
	ibv_wc_read_tm_info(cq, tm);
	ibv_end_poll(cq);
	return true;
}

/* test_tm_data: messages into a tag-matching SRQ through the C ABI, as
 * UCX sends them (ibv_tmh, ibv_rvh from tm_types.h): an EAGER message
 * matched by its tag, a NO_TAG message into an ordinary SRQ buffer, and a
 * rendezvous the receiver fetches with its own READ and answers with a
 * FIN (docs/tag-matching.md). Sender A and receiver B are two RC QPs of
 * the one device; B's receives come from the TM-SRQ. */
static void test_tm_data(struct env *e)
{
	struct ibv_cq_init_attr_ex ca = { .cqe = 64, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN |
							      IBV_WC_EX_WITH_TM_INFO };
	struct ibv_srq_init_attr_ex sx = {};
	struct ibv_qp_init_attr ia = {};
	struct ibv_cq_ex *cqx = NULL;
	struct ibv_cq *cqa = NULL, *cqb;
	struct ibv_srq *srq = NULL;
	struct ibv_qp *qa = NULL, *qb = NULL;
	struct ibv_mr *mra = NULL, *mrb = NULL;
	char *bufa, *bufb;
	struct ibv_ops_wr op, *obad;
	struct ibv_send_wr swr, *sbad;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_sge sge[2], rsge;
	struct ibv_tmh tmh;
	struct ibv_rvh rvh;
	struct ibv_wc wc;
	struct ibv_wc_tm_info tm;
	const char eager[] = "an eager message";
	bool got;
	int i;

	bufa = aligned_alloc(4096, 4 * BUF_SIZE);
	bufb = aligned_alloc(4096, 4 * BUF_SIZE);
	memset(bufa, 0, 4 * BUF_SIZE);
	memset(bufb, 0, 4 * BUF_SIZE);
	mra = ibv_reg_mr(e->pd, bufa, 4 * BUF_SIZE, RC_ACCESS);
	mrb = ibv_reg_mr(e->pd, bufb, 4 * BUF_SIZE, RC_ACCESS);
	cqx = ibv_create_cq_ex(e->ctx, &ca);
	cqa = ibv_create_cq(e->ctx, 16, NULL, NULL, 0);
	if (!check(mra && mrb && cqx && cqa, "TM: buffers and CQs (an extended CQ with IBV_WC_EX_WITH_TM_INFO)"))
		goto out;
	cqb = ibv_cq_ex_to_cq(cqx);
	sx.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
		       IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
	sx.srq_type = IBV_SRQT_TM;
	sx.pd = e->pd;
	sx.cq = cqb;
	sx.attr.max_wr = 16;
	sx.attr.max_sge = 2;
	sx.tm_cap.max_num_tags = 16;
	sx.tm_cap.max_ops = 8;
	srq = ibv_create_srq_ex(e->ctx, &sx);
	if (!check(srq != NULL, "TM: ibv_create_srq_ex(IBV_SRQT_TM) with a CQ"))
		goto out;
	ia = (struct ibv_qp_init_attr){ .send_cq = cqa, .recv_cq = cqa, .qp_type = IBV_QPT_RC,
					.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2,
						 .max_recv_sge = 2 } };
	qa = ibv_create_qp(e->pd, &ia);
	ia = (struct ibv_qp_init_attr){ .send_cq = cqb, .recv_cq = cqb, .srq = srq,
					.qp_type = IBV_QPT_RC,
					.cap = { .max_send_wr = 8, .max_send_sge = 2 } };
	qb = ibv_create_qp(e->pd, &ia);
	if (!check(qa && qb, "TM: a sender QP and a receiver QP on the TM-SRQ"))
		goto out;
	if (!check(!qp_to_init(qa, RC_ACCESS) && !qp_to_init(qb, RC_ACCESS) &&
			   !qp_to_rtr(qa, qb->qp_num, &e->gid) && !qp_to_rtr(qb, qa->qp_num, &e->gid) &&
			   !qp_to_rts(qa) && !qp_to_rts(qb),
		   "TM: the two QPs connected to each other"))
		goto out;

	/* EAGER: the tagged buffer receives the payload without the TMH. */
	memset(&op, 0, sizeof(op));
	op.wr_id = 1;
	op.opcode = IBV_WR_TAG_ADD;
	rsge = (struct ibv_sge){ (uintptr_t)bufb, 256, mrb->lkey };
	op.tm.add.recv_wr_id = 0x42;
	op.tm.add.sg_list = &rsge;
	op.tm.add.num_sge = 1;
	op.tm.add.tag = 0x1234;
	op.tm.add.mask = ~0ULL;
	check_ret(ibv_post_srq_ops(srq, &op, &obad), 0, "TM: TAG_ADD tag 0x1234 (unsignaled)");
	memset(&tmh, 0, sizeof(tmh));
	tmh.opcode = IBV_TMH_EAGER;
	tmh.app_ctx = htobe32(7);
	tmh.tag = htobe64(0x1234);
	memcpy(bufa, &tmh, sizeof(tmh));
	memcpy(bufa + 64, eager, sizeof(eager));
	sge[0] = (struct ibv_sge){ (uintptr_t)bufa, sizeof(tmh), mra->lkey };
	sge[1] = (struct ibv_sge){ (uintptr_t)bufa + 64, sizeof(eager), mra->lkey };
	swr = (struct ibv_send_wr){ .wr_id = 2, .sg_list = sge, .num_sge = 2,
				    .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	check_ret(ibv_post_send(qa, &swr, &sbad), 0, "TM: post an EAGER SEND (TMH + payload)");
	got = poll_tm(cqx, &wc, &tm);
	check(got && wc.status == IBV_WC_SUCCESS &&
		      wc.opcode == IBV_WC_TM_RECV && wc.wr_id == 0x42 &&
		      (wc.wc_flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID)) ==
			      (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID) &&
		      wc.byte_len == sizeof(eager) && tm.tag == 0x1234,
	      "TM: the EAGER message completes as IBV_WC_TM_RECV, MATCH|DATA_VALID, its "
	      "recv_wr_id, byte_len %u, tag %#" PRIx64 " (opcode %d, flags %#x)",
	      wc.byte_len, (uint64_t)tm.tag, wc.opcode, wc.wc_flags);
	check(!memcmp(bufb, eager, sizeof(eager)), "TM: the tagged buffer holds the payload");
	check(poll_n(cqa, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 2,
	      "TM: the sender's SEND completes");

	/* NO_TAG: an ordinary SRQ receive gets the whole message. */
	rsge = (struct ibv_sge){ (uintptr_t)bufb + 1024, 256, mrb->lkey };
	rwr = (struct ibv_recv_wr){ .wr_id = 0x50, .sg_list = &rsge, .num_sge = 1 };
	check_ret(ibv_post_srq_recv(srq, &rwr, &rbad), 0, "TM: post an ordinary SRQ receive");
	tmh.opcode = IBV_TMH_NO_TAG;
	memcpy(bufa, &tmh, sizeof(tmh));
	swr.wr_id = 3;
	check_ret(ibv_post_send(qa, &swr, &sbad), 0, "TM: post a NO_TAG SEND");
	got = poll_tm(cqx, &wc, &tm);
	check(got && wc.status == IBV_WC_SUCCESS &&
		      wc.opcode == IBV_WC_TM_NO_TAG && wc.wr_id == 0x50 &&
		      wc.byte_len == sizeof(tmh) + sizeof(eager),
	      "TM: the NO_TAG message completes as IBV_WC_TM_NO_TAG in the SRQ buffer, "
	      "TMH included (byte_len %u, opcode %d)", wc.byte_len, wc.opcode);
	check(!memcmp(bufb + 1024 + sizeof(tmh), eager, sizeof(eager)),
	      "TM: the ordinary buffer holds the TMH and the payload");
	check(poll_n(cqa, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 3,
	      "TM: the NO_TAG SEND completes");

	/* Rendezvous: B READs A's 6000 bytes into the tagged buffer, then
	 * sends A a FIN naming the tag. */
	for (i = 0; i < 6000; i++)
		bufa[BUF_SIZE + i] = (char)(i * 13);
	rsge = (struct ibv_sge){ (uintptr_t)bufa + 3 * BUF_SIZE, 64, mra->lkey };
	rwr = (struct ibv_recv_wr){ .wr_id = 0x60, .sg_list = &rsge, .num_sge = 1 };
	check_ret(ibv_post_recv(qa, &rwr, &rbad), 0, "TM: the sender posts a receive for the FIN");
	memset(&op, 0, sizeof(op));
	op.opcode = IBV_WR_TAG_ADD;
	rsge = (struct ibv_sge){ (uintptr_t)bufb + BUF_SIZE, 8192, mrb->lkey };
	op.tm.add.recv_wr_id = 0x43;
	op.tm.add.sg_list = &rsge;
	op.tm.add.num_sge = 1;
	op.tm.add.tag = 0x5678;
	op.tm.add.mask = ~0ULL;
	check_ret(ibv_post_srq_ops(srq, &op, &obad), 0, "TM: TAG_ADD tag 0x5678, 8 KiB");
	tmh.opcode = IBV_TMH_RNDV;
	tmh.app_ctx = htobe32(9);
	tmh.tag = htobe64(0x5678);
	rvh.va = htobe64((uintptr_t)bufa + BUF_SIZE);
	rvh.rkey = htobe32(mra->rkey);
	rvh.len = htobe32(6000);
	memcpy(bufa, &tmh, sizeof(tmh));
	memcpy(bufa + sizeof(tmh), &rvh, sizeof(rvh));
	sge[0] = (struct ibv_sge){ (uintptr_t)bufa, sizeof(tmh) + sizeof(rvh), mra->lkey };
	swr = (struct ibv_send_wr){ .wr_id = 4, .sg_list = sge, .num_sge = 1,
				    .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	check_ret(ibv_post_send(qa, &swr, &sbad), 0, "TM: post a rendezvous SEND (TMH + RVH)");
	got = poll_tm(cqx, &wc, &tm);
	check(got && wc.status == IBV_WC_SUCCESS &&
		      wc.opcode == IBV_WC_TM_RECV && wc.wr_id == 0x43 &&
		      (wc.wc_flags & IBV_WC_TM_MATCH) && !(wc.wc_flags & IBV_WC_TM_DATA_VALID) &&
		      tm.tag == 0x5678,
	      "TM: the rendezvous matches: IBV_WC_TM_RECV with MATCH (flags %#x)", wc.wc_flags);
	got = poll_tm(cqx, &wc, &tm);
	check(got && wc.status == IBV_WC_SUCCESS &&
		      wc.opcode == IBV_WC_TM_RECV && wc.wr_id == 0x43 &&
		      (wc.wc_flags & IBV_WC_TM_DATA_VALID) && wc.byte_len == 6000,
	      "TM: the READ completes it: IBV_WC_TM_RECV with DATA_VALID, byte_len %u",
	      wc.byte_len);
	check(!memcmp(bufb + BUF_SIZE, bufa + BUF_SIZE, 6000),
	      "TM: the tagged buffer holds the sender's 6000 bytes");
	for (i = 0; i < 2; i++) {
		if (poll_n(cqa, &wc, 1) != 1)
			break;
		if (wc.opcode == IBV_WC_RECV) {
			memcpy(&tmh, bufa + 3 * BUF_SIZE, sizeof(tmh));
			check(wc.status == IBV_WC_SUCCESS && wc.wr_id == 0x60 &&
				      tmh.opcode == IBV_TMH_FIN && be64toh(tmh.tag) == 0x5678 &&
				      be32toh(tmh.app_ctx) == 9,
			      "TM: the sender receives a FIN with the tag and app_ctx");
		} else {
			check(wc.status == IBV_WC_SUCCESS && wc.wr_id == 4,
			      "TM: the rendezvous SEND completes");
		}
	}
	check_int(i, 2, "TM: the sender saw its SEND complete and the FIN arrive");
out:
	if (qa)
		ibv_destroy_qp(qa);
	if (qb)
		ibv_destroy_qp(qb);
	if (srq)
		ibv_destroy_srq(srq);
	if (cqx)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	if (cqa)
		ibv_destroy_cq(cqa);
	if (mra)
		ibv_dereg_mr(mra);
	if (mrb)
		ibv_dereg_mr(mrb);
	free(bufa);
	free(bufb);
}

static void test_rc(struct env *e)
{
	struct rc rc = { .e = e };

	if (rc_setup(&rc)) {
		rc_query(&rc);
		rc_send(&rc);
		rc_send_imm(&rc);
		rc_rdma(&rc);
		rc_inline(&rc);
		rc_list(&rc);
		rc_wr_api(&rc);
		rc_events(&rc);
		rc_neighbour(&rc);
	}
	rc_teardown(&rc);
}

/* ------------------------------------------------------------- UD data */

/* What rdma-core's ibv_init_ah_from_wc reads from a RoCE GRH buffer: an
 * IPv6 header, or (RoCEv2 over IPv4) an IPv4 header in its last 20
 * bytes. Returns the IP version, -1 if neither. */
static bool ipv4_csum_ok(const struct iphdr *ip4)
{
	const uint16_t *p = (const uint16_t *)ip4;
	uint32_t sum = 0;
	int i;

	for (i = 0; i < 10; i++)
		sum += p[i];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return sum == 0xffff;
}

static int parse_grh(const struct ibv_grh *grh, union ibv_gid *sgid,
		     union ibv_gid *dgid, uint8_t *hop, uint8_t *tclass)
{
	const struct iphdr *ip4 = (const void *)((const char *)grh + 20);
	uint32_t vtf = be32toh(grh->version_tclass_flow);
	int version;

	if ((vtf >> 28) != 6) {
		version = ip4->version == 4 ? 4 : -1;
	} else {
		/* version 6, or an IPv4 header that checks out */
		version = ip4->ihl == 5 && ipv4_csum_ok(ip4) ? 4 : 6;
	}
	if (version == 4) {
		memset(sgid, 0, sizeof(*sgid));
		memset(dgid, 0, sizeof(*dgid));
		sgid->raw[10] = sgid->raw[11] = dgid->raw[10] = dgid->raw[11] = 0xff;
		memcpy(sgid->raw + 12, &ip4->saddr, 4);
		memcpy(dgid->raw + 12, &ip4->daddr, 4);
		*hop = ip4->ttl;
		*tclass = ip4->tos;
	} else if (version == 6) {
		*sgid = grh->sgid;
		*dgid = grh->dgid;
		*hop = grh->hop_limit;
		*tclass = (vtf >> 20) & 0xff;
		if (grh->next_hdr != IPPROTO_UDP)
			version = -1; /* RoCEv2 is UDP */
	}
	return version;
}

struct ud {
	struct env *e;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	struct ibv_qp *qa;	/* its own receive queue */
	struct ibv_qp *qb;	/* receives through srq */
	struct ibv_ah *ah;
	char *buf;
	struct ibv_mr *mr;
};

enum { UD_SLOT = GRH_LEN + 128 };

static int ud_post_srq(struct ud *u, int slot)
{
	struct ibv_sge sge = { (uintptr_t)u->buf + slot * UD_SLOT, UD_SLOT, u->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 0x500 + slot, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_srq_recv(u->srq, &wr, &bad);
}

static int ud_send(struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn, uint64_t wr_id,
		   struct ibv_mr *mr, const char *data, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)data, len, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;

	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = QKEY;
	return ibv_post_send(qp, &wr, &bad);
}

/* Takes async events until one of type want for obj (ack'ing each). */
static bool wait_async(struct env *e, enum ibv_event_type want, void *obj)
{
	struct pollfd pfd = { .fd = e->ctx->async_fd, .events = POLLIN };
	long long end = now_ms() + TIMEOUT_MS;
	struct ibv_async_event ev;
	bool found = false;

	while (!found && now_ms() < end) {
		if (poll(&pfd, 1, (int)(end - now_ms())) <= 0)
			break;
		if (ibv_get_async_event(e->ctx, &ev))
			continue;
		diag("async event: %s", ibv_event_type_str(ev.event_type));
		found = ev.event_type == want && ev.element.srq == obj;
		ibv_ack_async_event(&ev);
	}
	return found;
}

static bool ud_setup(struct ud *u)
{
	struct env *e = u->e;
	struct ibv_srq_init_attr si = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_qp_init_attr ia = { .cap = { 16, 16, 1, 1, 0 }, .qp_type = IBV_QPT_UD };
	struct ibv_ah_attr aa = {
		.is_global = 1,
		.grh = { .sgid_index = GID_INDEX, .hop_limit = 64 },
		.port_num = PORT,
	};
	struct ibv_ah *ah;
	int i, err;

	u->buf = aligned_alloc(4096, BUF_SIZE);
	memset(u->buf, 0, BUF_SIZE);
	u->mr = ibv_reg_mr(e->pd, u->buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
	u->cq = ibv_create_cq(e->ctx, 32, NULL, NULL, 0);
	u->srq = ibv_create_srq(e->pd, &si);
	if (!check(u->mr && u->cq && u->srq, "the UD MR, CQ and SRQ"))
		return false;
	ia.send_cq = ia.recv_cq = u->cq;
	u->qa = ibv_create_qp(e->pd, &ia);
	ia.srq = u->srq;
	u->qb = ibv_create_qp(e->pd, &ia);
	if (!check(u->qa && u->qb, "ibv_create_qp(UD), one of them on the SRQ"))
		return false;
	check(u->qb->srq == u->srq && u->qa->qp_type == IBV_QPT_UD, "the UD QPs' type and srq");
	check_ret(qp_to_init(u->qa, 0), 0, "UD RESET->INIT (qkey)");
	check_ret(qp_to_rtr(u->qa, 0, &e->gid), 0, "UD INIT->RTR");
	check_ret(qp_to_rts(u->qa), 0, "UD RTR->RTS");
	if (qp_to_init(u->qb, 0) || qp_to_rtr(u->qb, 0, &e->gid) || qp_to_rts(u->qb))
		return check(false, "the second UD QP to RTS");

	aa.grh.dgid = e->gid;
	u->ah = ibv_create_ah(e->pd, &aa);
	if (!check(u->ah != NULL, "ibv_create_ah (GRH to GID %d)", GID_INDEX))
		return false;
	check(u->ah->pd == e->pd && u->ah->context == e->ctx, "the AH's pd and context");

	/* an sgid_index (a uint8_t) of an empty entry: the kernel answers
	 * ENODATA (rdma_get_gid_attr), EINVAL past the table */
	for (i = 0; i < 256 && i < e->pattr.gid_tbl_len; i++) {
		static const union ibv_gid zero;
		union ibv_gid g;

		if (i != GID_INDEX && !ibv_query_gid(e->ctx, PORT, i, &g) &&
		    !memcmp(&g, &zero, sizeof(g)))
			break;
	}
	aa.grh.sgid_index = i;
	errno = 0;
	ah = ibv_create_ah(e->pd, &aa);
	err = errno;
	check(!ah && (err == ENODATA || err == EINVAL),
	      "ibv_create_ah with sgid_index %d, an empty GID entry: ENODATA or EINVAL (%s)",
	      i, errname(err));
	if (ah)
		ibv_destroy_ah(ah);
	aa.grh.sgid_index = GID_INDEX;
	aa.is_global = 0;
	errno = 0;
	ah = ibv_create_ah(e->pd, &aa);
	check_fail(!ah, errno, EINVAL, "ibv_create_ah without a GRH on RoCE: EINVAL");
	if (ah)
		ibv_destroy_ah(ah);
	return true;
}

static void ud_mcast(struct ud *u, struct ibv_qp *rc_qp)
{
	union ibv_gid mgid = { .raw = { 0xff, 0x0e, [10] = 0xff, [11] = 0xff, 0xe0, 0, 0, 1 } };

	check_ret(ibv_attach_mcast(u->qa, &mgid, 0), 0, "ibv_attach_mcast of a UD QP");
	check_ret(ibv_destroy_qp(u->qa), EBUSY,
		  "ibv_destroy_qp of a QP attached to a group: EBUSY");
	check_ret(ibv_detach_mcast(u->qa, &mgid, 0), 0, "ibv_detach_mcast");
	check_ret(ibv_attach_mcast(u->qa, &u->e->gid, 0), EINVAL,
		  "ibv_attach_mcast of a unicast GID: EINVAL");
	if (rc_qp)
		check_ret(ibv_attach_mcast(rc_qp, &mgid, 0), EINVAL,
			  "ibv_attach_mcast of an RC QP: EINVAL");
}

static void ud_traffic(struct ud *u)
{
	struct env *e = u->e;
	char *sbuf = u->buf + 3072;
	struct ibv_wc wc[4], *recv[2] = { NULL, NULL }, rwc;
	struct ibv_ah_attr aa;
	struct ibv_grh *grh;
	struct ibv_ah *ah;
	struct ibv_srq_attr sa;
	struct ibv_sge sge;
	struct ibv_recv_wr rwr, *rbad;
	union ibv_gid sgid, dgid;
	uint8_t hop = 0, tclass = 0;
	int i, n, nsend = 0, version;

	for (i = 0; i < 4; i++)
		ud_post_srq(u, i);
	sa.srq_limit = 3;
	check_ret(ibv_modify_srq(u->srq, &sa, IBV_SRQ_LIMIT), 0,
		  "ibv_modify_srq arms srq_limit 3 with 4 receives posted");

	strcpy(sbuf, "ud one");
	strcpy(sbuf + 64, "ud two");
	check_ret(ud_send(u->qa, u->ah, u->qb->qp_num, 0x601, u->mr, sbuf, 7), 0,
		  "ibv_post_send(UD SEND) with the AH");
	check_ret(ud_send(u->qa, u->ah, u->qb->qp_num, 0x602, u->mr, sbuf + 64, 7), 0,
		  "a second UD SEND");
	n = poll_n(u->cq, wc, 4);
	check_int(n, 4, "two sends and two receives complete");
	for (i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			diag("  wc %#" PRIx64 ": %s", wc[i].wr_id, ibv_wc_status_str(wc[i].status));
		if (wc[i].opcode == IBV_WC_SEND)
			nsend++;
		else if (wc[i].opcode == IBV_WC_RECV && wc[i].qp_num == u->qb->qp_num)
			recv[recv[0] ? 1 : 0] = &wc[i];
	}
	check(nsend == 2 && recv[0] && recv[1], "UD: two SENDs, two RECVs on the SRQ's QP");
	if (!recv[0] || !recv[1])
		return;
	check(recv[0]->status == IBV_WC_SUCCESS && recv[0]->byte_len == GRH_LEN + 7 &&
		      (recv[0]->wc_flags & IBV_WC_GRH) && recv[0]->src_qp == u->qa->qp_num,
	      "UD RECV: byte_len is GRH + 7 (%u), IBV_WC_GRH, src_qp is the sender",
	      recv[0]->byte_len);
	{
		const char *d0 = u->buf + (recv[0]->wr_id - 0x500) * UD_SLOT + GRH_LEN;
		const char *d1 = u->buf + (recv[1]->wr_id - 0x500) * UD_SLOT + GRH_LEN;

		check((!strcmp(d0, "ud one") && !strcmp(d1, "ud two")) ||
			      (!strcmp(d0, "ud two") && !strcmp(d1, "ud one")),
		      "UD: each message follows the 40 bytes of GRH");
	}

	/* the GRH, and an AH back to the sender from it */
	grh = (struct ibv_grh *)(u->buf + (recv[0]->wr_id - 0x500) * UD_SLOT);
	{
		char hex[2 * GRH_LEN + 1];

		for (i = 0; i < GRH_LEN; i++)
			sprintf(hex + 2 * i, "%02x", ((unsigned char *)grh)[i]);
		diag("GRH area of a UD receive: %s", hex);
	}
	version = parse_grh(grh, &sgid, &dgid, &hop, &tclass);
	check(version == 4 || version == 6, "the GRH buffer holds a RoCEv2 header (IPv%d)", version);
	check(!memcmp(&sgid, &e->gid, sizeof(sgid)) && !memcmp(&dgid, &e->gid, sizeof(dgid)),
	      "the header's source and destination are GID %d", GID_INDEX);
	/* one host, no router: the sender's AH hop_limit arrives unchanged,
	 * and rdma-core copies it into the reply's AH */
	check_int(hop, 64, "the header's hop limit (TTL) is the sender's hop_limit 64");
	if (version == 4)
		check(ipv4_csum_ok((const void *)((const char *)grh + 20)),
		      "the IPv4 header's checksum is valid");
	rwc = *recv[0];
	memset(&aa, 0xcc, sizeof(aa));
	check_ret(ibv_init_ah_from_wc(e->ctx, PORT, &rwc, grh, &aa), 0, "ibv_init_ah_from_wc");
	check(aa.is_global && aa.port_num == PORT && aa.grh.sgid_index == GID_INDEX &&
		      !memcmp(&aa.grh.dgid, &sgid, sizeof(sgid)),
	      "ibv_init_ah_from_wc: global, port 1, sgid_index %d, dgid the sender",
	      aa.grh.sgid_index);
	check(aa.grh.hop_limit == hop && aa.grh.traffic_class == tclass,
	      "ibv_init_ah_from_wc: hop_limit and traffic_class from the header (got %u/%u, want %u/%u)",
	      aa.grh.hop_limit, aa.grh.traffic_class, hop, tclass);

	ah = ibv_create_ah_from_wc(e->pd, &rwc, grh, PORT);
	if (check(ah != NULL, "ibv_create_ah_from_wc")) {
		sge = (struct ibv_sge){ (uintptr_t)u->buf + 2048, UD_SLOT, u->mr->lkey };
		rwr = (struct ibv_recv_wr){ .wr_id = 0x700, .sg_list = &sge, .num_sge = 1 };
		check_ret(ibv_post_recv(u->qa, &rwr, &rbad), 0, "ibv_post_recv on the UD QP");
		strcpy(sbuf + 128, "ud reply");
		check_ret(ud_send(u->qb, ah, rwc.src_qp, 0x603, u->mr, sbuf + 128, 9), 0,
			  "UD SEND of a reply with the AH from the completion");
		n = poll_n(u->cq, wc, 2);
		check(n == 2 && ((wc[0].wr_id == 0x603 && wc[1].wr_id == 0x700) ||
				 (wc[0].wr_id == 0x700 && wc[1].wr_id == 0x603)),
		      "the reply's SEND and RECV complete");
		check(strcmp(u->buf + 2048 + GRH_LEN, "ud reply") == 0, "the reply arrived");
		check_ret(ibv_destroy_ah(ah), 0, "ibv_destroy_ah of the AH from the completion");
	}

	/* a GRH to a GID that is not ours: rdma-core finds no sgid_index */
	memset(grh, 0, sizeof(*grh));
	grh->version_tclass_flow = htobe32(6u << 28);
	grh->next_hdr = IPPROTO_UDP;
	grh->hop_limit = 64;
	grh->sgid = e->gid;
	grh->dgid = e->gid;
	grh->dgid.raw[12] = 10;
	grh->dgid.raw[15] = 254;
	check_int(ibv_init_ah_from_wc(e->ctx, PORT, &rwc, grh, &aa), -1,
		  "ibv_init_ah_from_wc of a GRH to a GID not in the table is -1");
	errno = 0;
	ah = ibv_create_ah_from_wc(e->pd, &rwc, grh, PORT);
	check(ah == NULL, "ibv_create_ah_from_wc of that GRH fails");
	if (ah)
		ibv_destroy_ah(ah);

	/* two of four receives consumed: below the limit of 3 */
	check(wait_async(e, IBV_EVENT_SRQ_LIMIT_REACHED, u->srq),
	      "IBV_EVENT_SRQ_LIMIT_REACHED for the SRQ, acknowledged");
	errno = 0;
	{
		struct ibv_async_event ev;

		n = ibv_get_async_event(e->ctx, &ev);
		check_fail(n == -1, errno, EAGAIN, "no further async event: -1, EAGAIN");
		if (n == 0)
			ibv_ack_async_event(&ev);
	}
	check_ret(ibv_destroy_srq(u->srq), EBUSY, "ibv_destroy_srq while a QP uses it: EBUSY");
}

static void ud_teardown(struct ud *u)
{
	if (u->ah)
		check_ret(ibv_destroy_ah(u->ah), 0, "ibv_destroy_ah");
	if (u->qa)
		check_ret(ibv_destroy_qp(u->qa), 0, "ibv_destroy_qp of a UD QP");
	if (u->qb)
		check_ret(ibv_destroy_qp(u->qb), 0, "ibv_destroy_qp of the UD QP on the SRQ");
	if (u->srq)
		check_ret(ibv_destroy_srq(u->srq), 0, "ibv_destroy_srq once no QP uses it");
	if (u->cq)
		ibv_destroy_cq(u->cq);
	if (u->mr)
		ibv_dereg_mr(u->mr);
	free(u->buf);
}

static void test_ud(struct env *e, struct ibv_qp *rc_qp)
{
	struct ud u = { .e = e };

	if (ud_setup(&u)) {
		ud_mcast(&u, rc_qp);
		ud_traffic(&u);
	}
	ud_teardown(&u);
}

/* QP types, creation limits. */
static void test_qp_create(struct env *e)
{
	struct ibv_cq *cq = ibv_create_cq(e->ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr ia;
	static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	static const char *const names[] = { "RC", "UC", "UD" };
	struct ibv_qp *qp;
	size_t i;

	if (!check(cq != NULL, "ibv_create_cq for the QPs"))
		return;
	for (i = 0; i < 3; i++) {
		memset(&ia, 0, sizeof(ia));
		ia.send_cq = ia.recv_cq = cq;
		ia.cap = (struct ibv_qp_cap){ 8, 8, 1, 1, 0 };
		ia.qp_type = types[i];
		qp = ibv_create_qp(e->pd, &ia);
		if (check(qp != NULL && qp->qp_type == types[i] && qp->state == IBV_QPS_RESET,
			  "ibv_create_qp(%s) in RESET", names[i]))
			check_ret(ibv_destroy_qp(qp), 0, "ibv_destroy_qp(%s)", names[i]);
	}
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = cq;
	ia.cap = (struct ibv_qp_cap){ e->dattr.max_qp_wr + 1, 8, 1, 1, 0 };
	ia.qp_type = IBV_QPT_RC;
	errno = 0;
	qp = e->dattr.max_qp_wr < 0x7fffffff ? ibv_create_qp(e->pd, &ia) : NULL;
	check_fail(!qp, errno, EINVAL, "ibv_create_qp with max_send_wr > max_qp_wr: EINVAL");
	if (qp)
		ibv_destroy_qp(qp);
	ia.cap.max_send_wr = 8;
	ia.qp_type = (enum ibv_qp_type)99;
	errno = 0;
	qp = ibv_create_qp(e->pd, &ia);
	check(!qp && errno != 0, "ibv_create_qp of an unknown QP type fails (%s)", errname(errno));
	if (qp)
		ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
}

/* ------------------------------------------------------ import, copies */

static void test_import(struct env *e)
{
	void *p;

	errno = 0;
	p = ibv_import_device(e->ctx->cmd_fd);
	check_fail(!p, errno, EOPNOTSUPP, "ibv_import_device: EOPNOTSUPP");
	errno = 0;
	p = ibv_import_pd(e->ctx, e->pd->handle);
	check_fail(!p, errno, EOPNOTSUPP, "ibv_import_pd: EOPNOTSUPP");
	errno = 0;
	p = ibv_import_mr(e->pd, 1);
	check_fail(!p, errno, EOPNOTSUPP, "ibv_import_mr: EOPNOTSUPP");
	errno = 0;
	p = ibv_import_dm(e->ctx, 1);
	check_fail(!p, errno, EOPNOTSUPP, "ibv_import_dm: EOPNOTSUPP");
	/* nothing was imported: there is nothing to unimport but NULL */
	ibv_unimport_pd(NULL);
	ibv_unimport_mr(NULL);
	ibv_unimport_dm(NULL);
	check(true, "ibv_unimport_pd, ibv_unimport_mr, ibv_unimport_dm (NULL) return");
}

static void test_copies(void)
{
	struct ib_uverbs_ah_attr ka;
	struct ib_uverbs_qp_attr kq;
	struct ibv_ah_attr a;
	struct ibv_qp_attr q;
	struct ib_user_path_rec kp, kp2;
	struct ibv_sa_path_rec p;
	int i;

	memset(&ka, 0, sizeof(ka));
	for (i = 0; i < 16; i++)
		ka.grh.dgid[i] = i + 1;
	ka.grh.flow_label = 0x12345;
	ka.grh.sgid_index = 3;
	ka.grh.hop_limit = 17;
	ka.grh.traffic_class = 0x28;
	ka.dlid = 0x1234;
	ka.sl = 5;
	ka.src_path_bits = 2;
	ka.static_rate = 7;
	ka.is_global = 1;
	ka.port_num = 1;
	memset(&a, 0, sizeof(a));
	ibv_copy_ah_attr_from_kern(&a, &ka);
	check(!memcmp(a.grh.dgid.raw, ka.grh.dgid, 16) && a.grh.flow_label == 0x12345 &&
		      a.grh.sgid_index == 3 && a.grh.hop_limit == 17 &&
		      a.grh.traffic_class == 0x28 && a.dlid == 0x1234 && a.sl == 5 &&
		      a.src_path_bits == 2 && a.static_rate == 7 && a.is_global == 1 &&
		      a.port_num == 1,
	      "ibv_copy_ah_attr_from_kern copies every field");

	memset(&kq, 0, sizeof(kq));
	kq.qp_state = IBV_QPS_RTS;
	kq.cur_qp_state = IBV_QPS_RTR;
	kq.path_mtu = IBV_MTU_2048;
	kq.path_mig_state = IBV_MIG_ARMED;
	kq.qkey = 0xabcd;
	kq.rq_psn = 11;
	kq.sq_psn = 12;
	kq.dest_qp_num = 0x42;
	kq.qp_access_flags = IBV_ACCESS_REMOTE_READ;
	kq.max_send_wr = 21;
	kq.max_recv_wr = 22;
	kq.max_send_sge = 3;
	kq.max_recv_sge = 4;
	kq.max_inline_data = 99;
	kq.ah_attr = ka;
	kq.alt_ah_attr = ka;
	kq.alt_ah_attr.dlid = 0x4321;
	kq.pkey_index = 1;
	kq.alt_pkey_index = 2;
	kq.en_sqd_async_notify = 1;
	kq.sq_draining = 1;
	kq.max_rd_atomic = 6;
	kq.max_dest_rd_atomic = 7;
	kq.min_rnr_timer = 8;
	kq.port_num = 1;
	kq.timeout = 14;
	kq.retry_cnt = 5;
	kq.rnr_retry = 6;
	kq.alt_port_num = 1;
	kq.alt_timeout = 9;
	memset(&q, 0, sizeof(q));
	q.qp_state = IBV_QPS_ERR;
	ibv_copy_qp_attr_from_kern(&q, &kq);
	check(q.cur_qp_state == IBV_QPS_RTR && q.path_mtu == IBV_MTU_2048 &&
		      q.path_mig_state == IBV_MIG_ARMED && q.qkey == 0xabcd &&
		      q.rq_psn == 11 && q.sq_psn == 12 && q.dest_qp_num == 0x42 &&
		      q.qp_access_flags == IBV_ACCESS_REMOTE_READ &&
		      q.cap.max_send_wr == 21 && q.cap.max_recv_wr == 22 &&
		      q.cap.max_send_sge == 3 && q.cap.max_recv_sge == 4 &&
		      q.cap.max_inline_data == 99 && q.ah_attr.dlid == 0x1234 &&
		      q.alt_ah_attr.dlid == 0x4321 && q.ah_attr.grh.sgid_index == 3 &&
		      q.pkey_index == 1 && q.alt_pkey_index == 2 &&
		      q.en_sqd_async_notify == 1 && q.sq_draining == 1 &&
		      q.max_rd_atomic == 6 && q.max_dest_rd_atomic == 7 &&
		      q.min_rnr_timer == 8 && q.port_num == 1 && q.timeout == 14 &&
		      q.retry_cnt == 5 && q.rnr_retry == 6 && q.alt_port_num == 1 &&
		      q.alt_timeout == 9,
	      "ibv_copy_qp_attr_from_kern copies every field");
	check_int(q.qp_state, IBV_QPS_ERR, "ibv_copy_qp_attr_from_kern leaves qp_state (as rdma-core)");

	memset(&kp, 0, sizeof(kp));
	for (i = 0; i < 16; i++) {
		kp.dgid[i] = 0x10 + i;
		kp.sgid[i] = 0x30 + i;
	}
	kp.dlid = htobe16(0x11);
	kp.slid = htobe16(0x22);
	kp.raw_traffic = 1;
	kp.flow_label = htobe32(0x54321);
	kp.hop_limit = 33;
	kp.traffic_class = 44;
	kp.reversible = 1;
	kp.numb_path = 2;
	kp.pkey = htobe16(0xffff);
	kp.sl = 3;
	kp.mtu_selector = 2;
	kp.mtu = IBV_MTU_4096;
	kp.rate_selector = 2;
	kp.rate = IBV_RATE_100_GBPS;
	kp.packet_life_time = 18;
	kp.preference = 1;
	kp.packet_life_time_selector = 2;
	memset(&p, 0, sizeof(p));
	ibv_copy_path_rec_from_kern(&p, &kp);
	check(!memcmp(p.dgid.raw, kp.dgid, 16) && !memcmp(p.sgid.raw, kp.sgid, 16) &&
		      p.dlid == kp.dlid && p.slid == kp.slid && p.raw_traffic == 1 &&
		      p.flow_label == kp.flow_label && p.hop_limit == 33 &&
		      p.traffic_class == 44 && p.reversible == 1 && p.numb_path == 2 &&
		      p.pkey == kp.pkey && p.sl == 3 && p.mtu_selector == 2 &&
		      p.mtu == IBV_MTU_4096 && p.rate_selector == 2 &&
		      p.rate == IBV_RATE_100_GBPS && p.packet_life_time == 18 &&
		      p.preference == 1 && p.packet_life_time_selector == 2,
	      "ibv_copy_path_rec_from_kern copies every field");
	memset(&kp2, 0, sizeof(kp2));
	ibv_copy_path_rec_to_kern(&kp2, &p);
	check(memcmp(&kp, &kp2, sizeof(kp)) == 0,
	      "ibv_copy_path_rec_to_kern gives back the kernel record");
}

static void test_resolve(struct env *e)
{
	struct ibv_ah_attr aa = {
		.is_global = 1,
		.grh = { .dgid = e->gid, .sgid_index = GID_INDEX, .hop_limit = 64 },
		.port_num = PORT,
	};
	uint8_t mac[6] = { 0 };
	uint16_t vid = 0;
	int r;

	r = ibv_resolve_eth_l2_from_gid(e->ctx, &aa, mac, &vid);
	check_ret(r, 0, "ibv_resolve_eth_l2_from_gid of GID %d", GID_INDEX);
	diag("mac %02x:%02x:%02x:%02x:%02x:%02x vid %#x", mac[0], mac[1], mac[2],
	     mac[3], mac[4], mac[5], vid);
	r = ibv_resolve_eth_l2_from_gid(e->ctx, &aa, mac, NULL);
	check_ret(r, 0, "ibv_resolve_eth_l2_from_gid with vid NULL (rdma-core allows it)");
}

/* ----------------------------------------------------- NULL arguments */

/*
 * rdma-core dereferences these and crashes; softhca's library fails
 * cleanly. Checked: the call returns, and reports a failure.
 */
/* test_wild_inline: an IBV_SEND_INLINE request whose data address is
 * wild fails with EFAULT before the send queue takes anything: the next
 * SEND on the connected QP is the first (and only) one to complete and
 * to arrive. (The library read inline data inside the engine, after the
 * send queue had taken a slot for the request: the half-built request
 * stayed queued.) */
static void test_wild_inline(struct env *e)
{
	struct ibv_cq *cq = ibv_create_cq(e->ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
						.max_recv_sge = 1, .max_inline_data = 64 } };
	struct ibv_qp *qa = NULL, *qb = NULL;
	struct ibv_mr *mr = NULL;
	char *buf = calloc(1, BUF_SIZE);
	struct ibv_sge wild = { .addr = 0x10, .length = 16 };
	struct ibv_sge good = { (uintptr_t)buf, 16, 0 }, rsge = { (uintptr_t)buf + 64, 64, 0 };
	struct ibv_send_wr swr = { .wr_id = 1, .sg_list = &wild, .num_sge = 1,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED }, *sbad = NULL;
	struct ibv_recv_wr rwr = { .wr_id = 3, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	struct ibv_wc wc[4];
	int r, n;

	mr = buf ? ibv_reg_mr(e->pd, buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE) : NULL;
	ia.send_cq = ia.recv_cq = cq;
	if (cq && mr) {
		qa = ibv_create_qp(e->pd, &ia);
		qb = ibv_create_qp(e->pd, &ia);
	}
	if (!check(qa && qb && !qp_to_init(qa, RC_ACCESS) && !qp_to_init(qb, RC_ACCESS) &&
			   !qp_to_rtr(qa, qb->qp_num, &e->gid) &&
			   !qp_to_rtr(qb, qa->qp_num, &e->gid) && !qp_to_rts(qa) && !qp_to_rts(qb),
		   "two connected QPs for the wild inline send"))
		goto out;
	good.lkey = rsge.lkey = mr->lkey;
	r = ibv_post_send(qa, &swr, &sbad);
	check(r == EFAULT && sbad == &swr,
	      "an inline SEND from address 0x10 fails with EFAULT and bad_wr set (%s)", errname(r));
	memcpy(buf, "after the wild one", 16);
	check_ret(ibv_post_recv(qb, &rwr, &rbad), 0, "the peer posts a receive");
	swr.wr_id = 2;
	swr.sg_list = &good;
	check_ret(ibv_post_send(qa, &swr, &sbad), 0, "then an inline SEND from good memory");
	n = poll_n(cq, wc, 2);
	check(n == 2, "two completions: the good SEND and its receive (%d)", n);
	for (r = 0; r < n; r++)
		check(wc[r].status == IBV_WC_SUCCESS && (wc[r].wr_id == 2 || wc[r].wr_id == 3),
		      "completion %d is wr_id %" PRIu64 " (2 or 3), %s", r, wc[r].wr_id,
		      ibv_wc_status_str(wc[r].status));
	check(!memcmp(buf + 64, "after the wild one", 16), "the receive holds the good SEND's data");
	check(poll_n(cq, wc, 1) == 0, "nothing else completes");
out:
	if (qa)
		ibv_destroy_qp(qa);
	if (qb)
		ibv_destroy_qp(qb);
	if (cq)
		ibv_destroy_cq(cq);
	if (mr)
		ibv_dereg_mr(mr);
	free(buf);
}

/* take_async takes the next asynchronous event without acknowledging it. */
static bool take_async(struct env *e, struct ibv_async_event *ev)
{
	struct pollfd pfd = { .fd = e->ctx->async_fd, .events = POLLIN };

	if (poll(&pfd, 1, TIMEOUT_MS) <= 0)
		return false;
	return ibv_get_async_event(e->ctx, ev) == 0;
}

/* test_two_events: two events about one QP are taken before either is
 * acknowledged (ibv_ack_async_event(3) allows any order); both
 * acknowledgements count, so ibv_destroy_qp, which waits for them,
 * returns. (The library kept one outstanding event per object: the
 * second acknowledgement was lost and the destroy never returned.) */
static void test_two_events(struct env *e)
{
	struct ibv_srq_init_attr si = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_cq *cq = ibv_create_cq(e->ctx, 4, NULL, NULL, 0);
	struct ibv_srq *srq = ibv_create_srq(e->pd, &si);
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC, .srq = srq,
				       .cap = { .max_send_wr = 1, .max_send_sge = 1 } };
	struct ibv_qp_attr a = {};
	struct ibv_async_event ev[2];
	struct ibv_qp *qp;
	bool got;

	ia.send_cq = ia.recv_cq = cq;
	qp = cq && srq ? ibv_create_qp(e->pd, &ia) : NULL;
	if (!check(qp != NULL, "a QP on an SRQ for two events"))
		goto out;
	/* A QP on an SRQ that enters ERR raises IBV_EVENT_QP_LAST_WQE_REACHED;
	 * back to RESET and to ERR again raises it again. */
	a.qp_state = IBV_QPS_ERR;
	ibv_modify_qp(qp, &a, IBV_QP_STATE);
	got = take_async(e, &ev[0]);
	a.qp_state = IBV_QPS_RESET;
	ibv_modify_qp(qp, &a, IBV_QP_STATE);
	a.qp_state = IBV_QPS_ERR;
	ibv_modify_qp(qp, &a, IBV_QP_STATE);
	got = take_async(e, &ev[1]) && got;
	if (!check(got && ev[0].event_type == IBV_EVENT_QP_LAST_WQE_REACHED &&
			   ev[1].event_type == IBV_EVENT_QP_LAST_WQE_REACHED &&
			   ev[0].element.qp == qp && ev[1].element.qp == qp,
		   "two IBV_EVENT_QP_LAST_WQE_REACHED for one QP, taken before either is acknowledged"))
		goto out;
	ibv_ack_async_event(&ev[1]);
	ibv_ack_async_event(&ev[0]);
	check_ret(ibv_destroy_qp(qp), 0, "ibv_destroy_qp returns once both events are acknowledged");
	qp = NULL;
out:
	if (qp)
		ibv_destroy_qp(qp);
	if (srq)
		ibv_destroy_srq(srq);
	if (cq)
		ibv_destroy_cq(cq);
}

/* test_wild_pointers: a request list with a wild scatter/gather pointer
 * makes the library's Go half fault; the verb fails (EFAULT) and the
 * process lives, where rdma-core would crash. The QP, its neighbour and
 * the CQ keep working afterwards. */
static void test_wild_pointers(struct env *e)
{
	struct ibv_cq *cq = ibv_create_cq(e->ctx, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_sge *wild = (struct ibv_sge *)(uintptr_t)0x10;
	struct ibv_send_wr swr = { .wr_id = 1, .sg_list = wild, .num_sge = 1,
				   .opcode = IBV_WR_SEND }, *sbad = NULL;
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = wild, .num_sge = 1 }, *rbad = NULL;
	struct ibv_wc wc;
	struct ibv_qp *qp;
	int r;

	ia.send_cq = ia.recv_cq = cq;
	qp = cq ? ibv_create_qp(e->pd, &ia) : NULL;
	if (!check(qp != NULL, "a QP for the wild-pointer posts"))
		goto out;
	r = ibv_post_send(qp, &swr, &sbad);
	check(r == EFAULT && sbad == &swr,
	      "ibv_post_send with sg_list %p fails with EFAULT and bad_wr set, the process lives (%s)",
	      (void *)wild, errname(r));
	r = ibv_post_recv(qp, &rwr, &rbad);
	check(r == EFAULT, "ibv_post_recv with sg_list %p fails with EFAULT (%s)", (void *)wild,
	      errname(r));
	check(ibv_poll_cq(cq, 1, &wc) == 0, "the CQ still answers, empty");
	check_ret(qp_to_init(qp, RC_ACCESS), 0, "the QP still moves to INIT");
out:
	if (qp)
		ibv_destroy_qp(qp);
	if (cq)
		ibv_destroy_cq(cq);
}

static void test_null_args(struct env *e)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	struct ibv_qp_attr qa = {};
	struct ibv_qp_init_attr qi = {};
	struct ibv_srq_init_attr si = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq_attr sa = {};
	struct ibv_ah_attr aa = {};
	struct ibv_async_event ev;
	struct ibv_gid_entry ge;
	struct ibv_cq *cq;
	struct ibv_ece ece = {};
	union ibv_gid g = {};
	uint8_t mac[6];
	uint16_t vid;
	__be16 pkey;
	void *cctx;
	char buf[8];

#define NULL_CASE(expr, cond) check((cond), "%s fails instead of crashing", expr)

	NULL_CASE("ibv_get_device_name(NULL)", ibv_get_device_name(NULL) == NULL);
	NULL_CASE("ibv_get_device_guid(NULL)", ibv_get_device_guid(NULL) == 0);
	NULL_CASE("ibv_get_device_index(NULL)", ibv_get_device_index(NULL) == -1);
	NULL_CASE("ibv_open_device(NULL)", ibv_open_device(NULL) == NULL);
	NULL_CASE("ibv_close_device(NULL)", ibv_close_device(NULL) != 0);
	NULL_CASE("ibv_query_device(NULL, attr)", ibv_query_device(NULL, &da) != 0);
	NULL_CASE("ibv_query_device(ctx, NULL)", ibv_query_device(e->ctx, NULL) != 0);
	NULL_CASE("ibv_query_port(NULL) (exported)",
		  (ibv_query_port)(NULL, PORT, (struct _compat_ibv_port_attr *)&pa) != 0);
	NULL_CASE("ibv_query_gid(NULL)", ibv_query_gid(NULL, PORT, 0, &g) != 0);
	NULL_CASE("ibv_query_gid(ctx, .., NULL)", ibv_query_gid(e->ctx, PORT, 0, NULL) != 0);
	NULL_CASE("_ibv_query_gid_ex(NULL)", ibv_query_gid_ex(NULL, PORT, 0, &ge, 0) != 0);
	NULL_CASE("_ibv_query_gid_table(NULL)", ibv_query_gid_table(NULL, &ge, 1, 0) < 0);
	NULL_CASE("ibv_query_pkey(NULL)", ibv_query_pkey(NULL, PORT, 0, &pkey) != 0);
	NULL_CASE("ibv_get_pkey_index(NULL)", ibv_get_pkey_index(NULL, PORT, 0xffff) == -1);
	NULL_CASE("ibv_alloc_pd(NULL)", ibv_alloc_pd(NULL) == NULL);
	NULL_CASE("ibv_dealloc_pd(NULL)", ibv_dealloc_pd(NULL) != 0);
	NULL_CASE("ibv_reg_mr(NULL)", ibv_reg_mr(NULL, buf, sizeof(buf), 0) == NULL);
	NULL_CASE("ibv_reg_mr_iova2(NULL)",
		  ibv_reg_mr_iova2(NULL, buf, sizeof(buf), (uintptr_t)buf, 0) == NULL);
	NULL_CASE("ibv_reg_dmabuf_mr(NULL)", ibv_reg_dmabuf_mr(NULL, 0, 8, 0, -1, 0) == NULL);
	NULL_CASE("ibv_rereg_mr(NULL)", ibv_rereg_mr(NULL, 0, NULL, NULL, 0, 0) != 0);
	NULL_CASE("ibv_dereg_mr(NULL)", ibv_dereg_mr(NULL) != 0);
	NULL_CASE("ibv_create_comp_channel(NULL)", ibv_create_comp_channel(NULL) == NULL);
	NULL_CASE("ibv_destroy_comp_channel(NULL)", ibv_destroy_comp_channel(NULL) != 0);
	NULL_CASE("ibv_create_cq(NULL)", ibv_create_cq(NULL, 4, NULL, NULL, 0) == NULL);
	NULL_CASE("ibv_resize_cq(NULL)", ibv_resize_cq(NULL, 4) != 0);
	NULL_CASE("ibv_destroy_cq(NULL)", ibv_destroy_cq(NULL) != 0);
	NULL_CASE("ibv_get_cq_event(NULL)", ibv_get_cq_event(NULL, &cq, &cctx) == -1);
	NULL_CASE("ibv_create_srq(NULL, attr)", ibv_create_srq(NULL, &si) == NULL);
	NULL_CASE("ibv_create_srq(pd, NULL)", ibv_create_srq(e->pd, NULL) == NULL);
	NULL_CASE("ibv_modify_srq(NULL)", ibv_modify_srq(NULL, &sa, IBV_SRQ_LIMIT) != 0);
	NULL_CASE("ibv_query_srq(NULL)", ibv_query_srq(NULL, &sa) != 0);
	NULL_CASE("ibv_destroy_srq(NULL)", ibv_destroy_srq(NULL) != 0);
	NULL_CASE("ibv_create_qp(NULL, attr)", ibv_create_qp(NULL, &qi) == NULL);
	NULL_CASE("ibv_create_qp(pd, NULL)", ibv_create_qp(e->pd, NULL) == NULL);
	NULL_CASE("ibv_create_qp(pd, attr without CQs)", ibv_create_qp(e->pd, &qi) == NULL);
	NULL_CASE("ibv_qp_to_qp_ex(NULL)", ibv_qp_to_qp_ex(NULL) == NULL);
	NULL_CASE("ibv_modify_qp(NULL)", ibv_modify_qp(NULL, &qa, IBV_QP_STATE) != 0);
	NULL_CASE("ibv_query_qp(NULL)", ibv_query_qp(NULL, &qa, 0, &qi) != 0);
	NULL_CASE("ibv_destroy_qp(NULL)", ibv_destroy_qp(NULL) != 0);
	NULL_CASE("ibv_attach_mcast(NULL)", ibv_attach_mcast(NULL, &g, 0) != 0);
	NULL_CASE("ibv_detach_mcast(NULL)", ibv_detach_mcast(NULL, &g, 0) != 0);
	NULL_CASE("ibv_query_ece(NULL)", ibv_query_ece(NULL, &ece) != 0);
	NULL_CASE("ibv_set_ece(NULL)", ibv_set_ece(NULL, &ece) != 0);
	check(ibv_query_qp_data_in_order(NULL, IBV_WR_SEND, 0) == 0,
	      "ibv_query_qp_data_in_order(NULL) answers 0 (not in order) instead of crashing");
	NULL_CASE("ibv_create_ah(NULL, attr)", ibv_create_ah(NULL, &aa) == NULL);
	NULL_CASE("ibv_create_ah(pd, NULL)", ibv_create_ah(e->pd, NULL) == NULL);
	NULL_CASE("ibv_destroy_ah(NULL)", ibv_destroy_ah(NULL) != 0);
	NULL_CASE("ibv_init_ah_from_wc(ctx, NULL wc)",
		  ibv_init_ah_from_wc(e->ctx, PORT, NULL, NULL, &aa) != 0);
	NULL_CASE("ibv_create_ah_from_wc(NULL)",
		  ibv_create_ah_from_wc(NULL, NULL, NULL, PORT) == NULL);
	NULL_CASE("ibv_resolve_eth_l2_from_gid(NULL)",
		  ibv_resolve_eth_l2_from_gid(NULL, &aa, mac, &vid) != 0);
	NULL_CASE("ibv_get_async_event(NULL)", ibv_get_async_event(NULL, &ev) == -1);
	NULL_CASE("ibv_read_sysfs_file(NULL)", ibv_read_sysfs_file(NULL, NULL, buf, sizeof(buf)) == -1);
	NULL_CASE("ibv_import_pd(NULL)", ibv_import_pd(NULL, 0) == NULL);
	NULL_CASE("ibv_import_mr(NULL)", ibv_import_mr(NULL, 0) == NULL);
	NULL_CASE("ibv_import_dm(NULL)", ibv_import_dm(NULL, 0) == NULL);
	ibv_ack_cq_events(NULL, 0);
	ibv_ack_async_event(NULL);
	check(true, "ibv_ack_cq_events(NULL) and ibv_ack_async_event(NULL) return");
#undef NULL_CASE
}

/* ------------------------------------------------------ hidden versions */

/*
 * The pre-1.1 ABI (IBVERBS_1.0 versions of 33 names) and the old provider
 * entry ibv_register_driver@IBVERBS_1.1 are hidden: only a binary linked
 * in 2006 binds them. They resolve by version; rdma-core implements the
 * old ABI (compat-1_0.c), softhca stubs it (compat.c).
 */
static void test_hidden_versions(void)
{
	static const char *const v10[] = {
		"ibv_ack_async_event", "ibv_ack_cq_events", "ibv_alloc_pd",
		"ibv_attach_mcast", "ibv_close_device", "ibv_create_ah",
		"ibv_create_cq", "ibv_create_qp", "ibv_create_srq",
		"ibv_dealloc_pd", "ibv_dereg_mr", "ibv_destroy_ah",
		"ibv_destroy_cq", "ibv_destroy_qp", "ibv_destroy_srq",
		"ibv_detach_mcast", "ibv_free_device_list", "ibv_get_async_event",
		"ibv_get_cq_event", "ibv_get_device_guid", "ibv_get_device_list",
		"ibv_get_device_name", "ibv_modify_qp", "ibv_modify_srq",
		"ibv_open_device", "ibv_query_device", "ibv_query_gid",
		"ibv_query_pkey", "ibv_query_port", "ibv_query_qp",
		"ibv_query_srq", "ibv_reg_mr", "ibv_resize_cq",
	};
	void *(*get_list)(int *);
	void (*free_list)(void *);
	const char *(*get_name)(void *);
	void (*reg_driver)(const char *, void *);
	size_t i, found = 0;
	void **list;
	int n = -1;

	for (i = 0; i < sizeof(v10) / sizeof(v10[0]); i++) {
		void *cur = dlvsym(RTLD_DEFAULT, v10[i], "IBVERBS_1.1");
		void *old = dlvsym(RTLD_DEFAULT, v10[i], "IBVERBS_1.0");

		if (cur && old && cur != old)
			found++;
		else
			diag("  %s: @IBVERBS_1.0 %p, @IBVERBS_1.1 %p", v10[i], old, cur);
	}
	check(found == sizeof(v10) / sizeof(v10[0]),
	      "dlvsym finds %zu names in both IBVERBS_1.0 and IBVERBS_1.1, distinct", found);

	/* Each pre-1.1 entry fails cleanly: errno ENOSYS, nothing returned
	 * (the void ones just return). Called with NULL arguments, which the
	 * stubs never touch. */
	found = 0;
	for (i = 0; i < sizeof(v10) / sizeof(v10[0]); i++) {
		long (*f)(void *, void *, void *, void *, void *) =
			(long (*)(void *, void *, void *, void *, void *))dlvsym(
				RTLD_DEFAULT, v10[i], "IBVERBS_1.0");
		bool is_void = !strcmp(v10[i], "ibv_ack_async_event") ||
			       !strcmp(v10[i], "ibv_ack_cq_events") ||
			       !strcmp(v10[i], "ibv_free_device_list");

		if (!f)
			continue;
		errno = 0;
		f(NULL, NULL, NULL, NULL, NULL);
		if (is_void || errno == ENOSYS)
			found++;
		else
			diag("  %s@IBVERBS_1.0: errno %s", v10[i], errname(errno));
	}
	check(found == sizeof(v10) / sizeof(v10[0]),
	      "each of the %zu pre-1.1 entries, called, fails cleanly with ENOSYS", found);

	reg_driver = (void (*)(const char *, void *))dlvsym(RTLD_DEFAULT, "ibv_register_driver",
							    "IBVERBS_1.1");
	if (check(reg_driver != NULL, "dlvsym finds ibv_register_driver@IBVERBS_1.1")) {
		reg_driver("abi-test", NULL);
		check(true, "ibv_register_driver@IBVERBS_1.1 returns (a no-op, as in rdma-core)");
	}

	get_list = (void *(*)(int *))dlvsym(RTLD_DEFAULT, "ibv_get_device_list", "IBVERBS_1.0");
	free_list = (void (*)(void *))dlvsym(RTLD_DEFAULT, "ibv_free_device_list", "IBVERBS_1.0");
	get_name = (const char *(*)(void *))dlvsym(RTLD_DEFAULT, "ibv_get_device_name",
						   "IBVERBS_1.0");
	if (!get_list || !free_list || !get_name)
		return;
	errno = 0;
	list = get_list(&n);
	check(list || errno != 0,
	      "ibv_get_device_list@IBVERBS_1.0 returns a list or fails with errno set (%s)",
	      errname(errno));
	check_todo(list && n == 1 && list[0] && get_name(list[0]) &&
			   strcmp(get_name(list[0]), "softhca0") == 0,
		   "softhca stubs the pre-1.1 ABI (compat.c)",
		   "ibv_get_device_list@IBVERBS_1.0 lists softhca0 for ibv_get_device_name@IBVERBS_1.0, as rdma-core's compat-1_0.c does");
	if (list)
		free_list(list);
}

/* --------------------------------------------------------------- main */

int main(void)
{
	struct env e = {};
	struct ibv_qp *rc_qp = NULL;
	bool sysfs_env_set;

	setvbuf(stdout, NULL, _IOLBF, 0);
	/* before the library reads it: rdma-core strips trailing slashes */
	sysfs_env_set = getenv("SYSFS_PATH") == NULL &&
			setenv("SYSFS_PATH", "/sys//", 1) == 0;

	test_strings();
	test_rates();
	test_fork();
	if (!test_device_list(&e))
		return 1;
	test_sysfs(sysfs_env_set);
	test_open_close(&e);
	test_query(&e);
	test_pd_mr(&e);
	if (!e.pd) {
		printf("Bail out! no PD\n");
		return 1;
	}
	test_cq(&e);
	test_srq(&e);
	test_qp_create(&e);
	test_rc(&e);
	test_tm_data(&e);
	{
		/* an RC QP for the multicast check */
		struct ibv_cq *cq = ibv_create_cq(e.ctx, 4, NULL, NULL, 0);
		struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq,
					       .cap = { 1, 1, 1, 1, 0 },
					       .qp_type = IBV_QPT_RC };

		rc_qp = cq ? ibv_create_qp(e.pd, &ia) : NULL;
		test_ud(&e, rc_qp);
		if (rc_qp)
			ibv_destroy_qp(rc_qp);
		if (cq)
			ibv_destroy_cq(cq);
	}
	test_resolve(&e);
	test_import(&e);
	test_copies();
	test_null_args(&e);
	test_wild_pointers(&e);
	test_two_events(&e);
	test_wild_inline(&e);
	test_hidden_versions();

	check_ret(ibv_dealloc_pd(e.pd), 0, "ibv_dealloc_pd once everything on it is gone");
	check_ret(ibv_close_device(e.ctx), 0, "ibv_close_device");

	printf("1..%d\n", ntests);
	if (nfailed)
		printf("# %d of %d checks failed\n", nfailed, ntests);
	else
		printf("# all %d checks passed\n", ntests);
	return nfailed ? 1 : 0;
}
