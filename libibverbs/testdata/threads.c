/*
 * threads: the library under an application's threads, as libibverbs
 * allows them (verbs are thread-safe): several threads each ping-pong on
 * their own pair of RC QPs of one device, two threads post to one QP at
 * once while a third polls its CQ, and another thread creates and
 * destroys objects on the same PD all the while. Every message's data is
 * checked. TAP output; the exit status is 0 only if every check passed.
 *
 * Build:  gcc -Wall -Werror -pthread -o threads threads.c -libverbs
 * Run:    LD_LIBRARY_PATH=<softhca's libibverbs.so.1> SOFTHCA_ADDR=127.0.0.1 ./threads
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define PAIRS 4
#define ROUNDS 2000
#define MSG 64
#define SHARED_POSTERS 2
#define SHARED_WRITES 1000
#define SLOT 64

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static atomic_int failures;
static atomic_bool churn_stop;
static int ntests;

static void check(bool ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s %d - ", ok ? "ok" : "not ok", ++ntests);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!ok)
		atomic_fetch_add(&failures, 1);
}

static long long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

/* poll1 waits (spinning, up to 10 s) for one completion. */
static bool poll1(struct ibv_cq *cq, struct ibv_wc *wc)
{
	long long end = now_ms() + 10000;
	int n;

	while ((n = ibv_poll_cq(cq, 1, wc)) == 0 && now_ms() < end)
		;
	return n == 1 && wc->status == IBV_WC_SUCCESS;
}

static int connect_qp(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
	};

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				     IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 1;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 1;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					     IBV_QP_MAX_QP_RD_ATOMIC);
}

/* A pair of RC QPs connected to each other, each with its own CQ. */
struct pair {
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	struct ibv_mr *mr[2];
	char *buf[2];
	int id;
	int done;
};

static bool pair_setup(struct pair *p, int depth)
{
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = depth, .max_recv_wr = depth,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	int i;

	for (i = 0; i < 2; i++) {
		p->buf[i] = calloc(1, SHARED_POSTERS * SHARED_WRITES * SLOT);
		p->mr[i] = ibv_reg_mr(pd, p->buf[i], SHARED_POSTERS * SHARED_WRITES * SLOT,
				      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		p->cq[i] = ibv_create_cq(ctx, 2 * depth, NULL, NULL, 0);
		ia.send_cq = ia.recv_cq = p->cq[i];
		p->qp[i] = p->cq[i] ? ibv_create_qp(pd, &ia) : NULL;
		if (!p->buf[i] || !p->mr[i] || !p->qp[i])
			return false;
	}
	return !connect_qp(p->qp[0], p->qp[1]->qp_num) && !connect_qp(p->qp[1], p->qp[0]->qp_num);
}

static void pair_teardown(struct pair *p)
{
	int i;

	for (i = 0; i < 2; i++) {
		if (p->qp[i])
			ibv_destroy_qp(p->qp[i]);
		if (p->cq[i])
			ibv_destroy_cq(p->cq[i]);
		if (p->mr[i])
			ibv_dereg_mr(p->mr[i]);
		free(p->buf[i]);
	}
}

static int post_recv(struct pair *p, int side)
{
	struct ibv_sge sge = { (uintptr_t)p->buf[side] + MSG, MSG, p->mr[side]->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(p->qp[side], &wr, &bad);
}

static int post_send(struct pair *p, int side, int seq)
{
	struct ibv_sge sge = { (uintptr_t)p->buf[side], MSG, p->mr[side]->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;

	snprintf(p->buf[side], MSG, "pair %d side %d message %d", p->id, side, seq);
	return ibv_post_send(p->qp[side], &wr, &bad);
}

/* pingpong: side 0 sends, side 1 answers, ROUNDS times, every message
 * checked; both sides run in this one thread, as a test of the thread's
 * own objects while the other threads use theirs. */
static void *pingpong(void *arg)
{
	struct pair *p = arg;
	struct ibv_wc wc;
	char want[MSG];
	int r, side;

	for (r = 0; r < ROUNDS; r++) {
		for (side = 0; side < 2; side++) {
			int peer = 1 - side;

			if (post_recv(p, peer) || post_send(p, side, r))
				return NULL;
			if (!poll1(p->cq[side], &wc) || !poll1(p->cq[peer], &wc))
				return NULL;
			snprintf(want, MSG, "pair %d side %d message %d", p->id, side, r);
			if (wc.opcode != IBV_WC_RECV || wc.byte_len != MSG ||
			    strcmp(p->buf[peer] + MSG, want))
				return NULL;
		}
	}
	p->done = r;
	return NULL;
}

/* The shared QP: two threads post WRITEs to one QP, one thread polls. */
struct shared {
	struct pair *p;
	int poster;
	atomic_int completed;
	atomic_int posted;
};

static struct shared shared;

static void *shared_poster(void *arg)
{
	int who = (int)(intptr_t)arg, i;
	struct pair *p = shared.p;

	for (i = 0; i < SHARED_WRITES; i++) {
		size_t off = ((size_t)who * SHARED_WRITES + i) * SLOT;
		struct ibv_sge sge = { (uintptr_t)p->buf[0] + off, SLOT, p->mr[0]->lkey };
		struct ibv_send_wr wr = { .wr_id = off, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;

		memset(p->buf[0] + off, 'a' + who, SLOT);
		wr.wr.rdma.remote_addr = (uintptr_t)p->buf[1] + off;
		wr.wr.rdma.rkey = p->mr[1]->rkey;
		/* Keep within the send queue: wait while it is full. */
		while (atomic_load(&shared.posted) - atomic_load(&shared.completed) >= 60)
			;
		atomic_fetch_add(&shared.posted, 1);
		if (ibv_post_send(p->qp[0], &wr, &bad)) {
			atomic_fetch_sub(&shared.posted, 1);
			return NULL;
		}
	}
	return NULL;
}

static void *shared_poller(void *arg)
{
	struct ibv_wc wc[8];
	long long end = now_ms() + 30000;
	int n, i;

	(void)arg;
	while (atomic_load(&shared.completed) < SHARED_POSTERS * SHARED_WRITES && now_ms() < end) {
		n = ibv_poll_cq(shared.p->cq[0], 8, wc);
		for (i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				return NULL;
			atomic_fetch_add(&shared.completed, 1);
		}
	}
	return NULL;
}

/* churn creates and destroys objects on the shared PD until told to
 * stop: the other threads' objects must not notice. */
static void *churn(void *arg)
{
	int *count = arg;
	char buf[256];

	while (!atomic_load(&churn_stop)) {
		struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
		struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					       .cap = { 1, 1, 1, 1, 0 } };
		struct ibv_qp *qp = cq ? ibv_create_qp(pd, &ia) : NULL;
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);

		if (!cq || !qp || !mr || ibv_destroy_qp(qp) || ibv_destroy_cq(cq) ||
		    ibv_dereg_mr(mr)) {
			*count = -1;
			return NULL;
		}
		(*count)++;
	}
	return NULL;
}

int main(void)
{
	struct ibv_device **list;
	struct pair pairs[PAIRS], sp;
	pthread_t th[PAIRS], posters[SHARED_POSTERS], poller, churner;
	int i, churned = 0, ok;

	setvbuf(stdout, NULL, _IOLBF, 0);
	list = ibv_get_device_list(NULL);
	if (!list || !list[0] || strcmp(ibv_get_device_name(list[0]), "softhca0")) {
		printf("Bail out! the first device is not softhca0\n");
		return 1;
	}
	ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	if (!pd || ibv_query_gid(ctx, 1, 1, &gid)) {
		printf("Bail out! no context, PD or GID 1\n");
		return 1;
	}

	memset(pairs, 0, sizeof(pairs));
	memset(&sp, 0, sizeof(sp));
	for (i = 0; i < PAIRS; i++) {
		pairs[i].id = i;
		check(pair_setup(&pairs[i], 16), "pair %d: two RC QPs connected to each other", i);
	}
	check(pair_setup(&sp, 64), "the shared pair");
	shared.p = &sp;

	pthread_create(&churner, NULL, churn, &churned);
	for (i = 0; i < PAIRS; i++)
		pthread_create(&th[i], NULL, pingpong, &pairs[i]);
	pthread_create(&poller, NULL, shared_poller, NULL);
	for (i = 0; i < SHARED_POSTERS; i++)
		pthread_create(&posters[i], NULL, shared_poster, (void *)(intptr_t)i);

	for (i = 0; i < PAIRS; i++)
		pthread_join(th[i], NULL);
	for (i = 0; i < SHARED_POSTERS; i++)
		pthread_join(posters[i], NULL);
	pthread_join(poller, NULL);
	atomic_store(&churn_stop, true);
	pthread_join(churner, NULL);

	for (i = 0; i < PAIRS; i++)
		check(pairs[i].done == ROUNDS, "pair %d: %d of %d round trips, every message checked",
		      i, pairs[i].done, ROUNDS);
	check(atomic_load(&shared.completed) == SHARED_POSTERS * SHARED_WRITES,
	      "two threads posting to one QP: %d of %d WRITEs completed",
	      atomic_load(&shared.completed), SHARED_POSTERS * SHARED_WRITES);
	ok = 1;
	for (i = 0; i < SHARED_POSTERS * SHARED_WRITES * SLOT; i++)
		if (sp.buf[1][i] != 'a' + i / (SHARED_WRITES * SLOT))
			ok = 0;
	check(ok, "the shared QP's WRITEs all landed, each poster's in its slots");
	check(churned > 0, "meanwhile another thread created and destroyed %d QP/CQ/MR sets", churned);

	for (i = 0; i < PAIRS; i++)
		pair_teardown(&pairs[i]);
	pair_teardown(&sp);
	check(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd once every thread's objects are gone");
	check(ibv_close_device(ctx) == 0, "ibv_close_device");
	printf("1..%d\n", ntests);
	return atomic_load(&failures) ? 1 : 0;
}
