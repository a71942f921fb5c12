/*
 * shca-tm: tag-matching messages from Linux rxe to a softhca tag-matching
 * SRQ (interop/tm.go). rxe has no tag matching of its own: tag matching
 * needs nothing of the sender, whose messages are ordinary SENDs that
 * begin with a TMH (struct ibv_tmh, <infiniband/tm_types.h>), and for a
 * rendezvous an RVH naming a buffer the receiver READs.
 *
 *   shca-tm [-d dev] [-g gidx] [-p port] [-s size] [-m mtu] [-n count] SERVER
 *
 * Message k (0 <= k < count) has tag tm_tag(k) and app_ctx k. When k is
 * even it is EAGER: the TMH, then size bytes, byte i = tm_pattern(k, i).
 * When k is odd it is a rendezvous: the TMH and an RVH naming size bytes
 * of this program's memory (REMOTE_READ) holding the same pattern; softhca
 * READs them and SENDs a FIN, a TMH with opcode FIN, tag tm_tag(k) and
 * app_ctx k, which this program receives and checks. One line per SEND
 * and per FIN, then "shca-tm: OK ..." and exit status 0 when every
 * completion and FIN was right; "shca-tm: FAIL ..." and status 1 otherwise.
 *
 * Connection set-up as shca-imm's (shca.h): this program is the client; it
 * sends its line, reads softhca's (softhca has added the tags by then),
 * moves its QP to RTS, sends 'g' and starts. At the end each side sends 'd'
 * and waits for the peer's.
 */
#define _GNU_SOURCE
static const char *prog = "shca-tm";
#include "shca.h"
#include <infiniband/tm_types.h>

static int size = 4096, count = 8, mtu = 1024;

static uint8_t tm_pattern(int k, int i)
{
	return (uint8_t)(i * 7 + (i >> 8) * 13 + k * 31 + 5);
}

static uint64_t tm_tag(int k)
{
	return 0x5a00000000000000ull | (uint64_t)k << 8 | 0x11;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct dest me, peer;
	const char *servername = NULL;
	uint8_t *buf, *msg_area, *data_area, *fin_area;
	int c, i, k, fd, nsend = 0, nfin = 0, nrndv, bad = 0;
	size_t slot;
	char ch;
	double t0, deadline;

	while ((c = getopt(argc, argv, "d:g:p:s:m:n:")) != -1) {
		switch (c) {
		case 'd': dev_name = optarg; break;
		case 'g': gid_index = atoi(optarg); break;
		case 'p': tcp_port = atoi(optarg); break;
		case 's': size = atoi(optarg); break;
		case 'm': mtu = atoi(optarg); break;
		case 'n': count = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-d dev] [-g gidx] [-p port] [-s size] [-m mtu] [-n count] server\n", argv[0]);
			return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "%s: the server's address is required\n", argv[0]);
		return 2;
	}
	servername = argv[optind];
	if (size < 1 || count < 1 || count > 1000)
		die("bad size %d or count %d", size, count);
	nrndv = count / 2;
	setvbuf(stdout, NULL, _IOLBF, 0);

	list = ibv_get_device_list(NULL);
	for (i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev_name))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		die("cannot open device %s", dev_name);

	/* Per message: its SEND (TMH + data, or TMH + RVH), the rendezvous
	 * data, and a FIN buffer. */
	slot = (size_t)size + sizeof(struct ibv_tmh);
	buf = aligned_alloc(4096, (3 * slot * count + 4095) & ~(size_t)4095);
	if (!buf)
		die("out of memory");
	memset(buf, 0, 3 * slot * count);
	msg_area = buf;
	data_area = buf + slot * count;
	fin_area = buf + 2 * slot * count;
	pd = ibv_alloc_pd(ctx);
	mr = pd ? ibv_reg_mr(pd, buf, 3 * slot * count, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ) : NULL;
	cq = ibv_create_cq(ctx, 2 * count + 2, NULL, NULL, 0);
	if (!mr || !cq)
		die("verbs set-up");
	{
		struct ibv_qp_init_attr ia = {
			.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = count, .max_recv_wr = count, .max_send_sge = 1, .max_recv_sge = 1 },
		};
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_INIT, .port_num = 1,
			.qp_access_flags = IBV_ACCESS_REMOTE_READ,
		};

		qp = ibv_create_qp(pd, &ia);
		if (!qp)
			die("create QP");
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			die("modify QP to INIT");
	}
	for (k = 0; k < nrndv; k++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(fin_area + k * slot), .length = slot, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 1000 + k, .sg_list = &sge, .num_sge = 1 }, *badwr;

		if (ibv_post_recv(qp, &wr, &badwr))
			die("post receive %d", k);
	}

	srand48(getpid() ^ time(NULL));
	me.qpn = qp->qp_num;
	me.psn = lrand48() & 0xffffff;
	me.rkey = mr->rkey;
	me.addr = (uintptr_t)data_area;
	if (ibv_query_gid(ctx, 1, gid_index, &me.gid))
		die("query GID %d", gid_index);
	fd = tcp_client(servername);
	send_dest(fd, &me);
	recv_dest(fd, &peer);
	{
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_RTR, .path_mtu = mtu_enum(mtu), .dest_qp_num = peer.qpn,
			.rq_psn = peer.psn, .max_dest_rd_atomic = 4, .min_rnr_timer = 12,
			.ah_attr = { .is_global = 1, .port_num = 1,
				     .grh = { .dgid = peer.gid, .sgid_index = gid_index, .hop_limit = 64 } },
		};

		if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
			die("modify QP to RTR");
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = me.psn;
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
			die("modify QP to RTS");
	}
	ch = 'g';
	xfer(fd, &ch, 1, 1);
	printf("client RC: local QPN 0x%06x PSN 0x%06x, remote QPN 0x%06x PSN 0x%06x, size %d, count %d, MTU %d\n",
	       me.qpn, me.psn, peer.qpn, peer.psn, size, count, mtu);

	t0 = now();
	for (k = 0; k < count; k++) {
		uint8_t *m = msg_area + k * slot, *d = data_area + k * slot;
		struct ibv_tmh *tmh = (struct ibv_tmh *)m;
		struct ibv_sge sge = { .addr = (uintptr_t)m, .lkey = mr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = k, .sg_list = &sge, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED,
			.opcode = IBV_WR_SEND,
		}, *badwr;

		tmh->opcode = k % 2 ? IBV_TMH_RNDV : IBV_TMH_EAGER;
		tmh->app_ctx = htonl(k);
		tmh->tag = htobe64(tm_tag(k));
		if (k % 2) {
			struct ibv_rvh *rvh = (struct ibv_rvh *)(tmh + 1);

			for (i = 0; i < size; i++)
				d[i] = tm_pattern(k, i);
			rvh->va = htobe64((uintptr_t)d);
			rvh->rkey = htonl(mr->rkey);
			rvh->len = htonl(size);
			sge.length = sizeof *tmh + sizeof *rvh;
		} else {
			for (i = 0; i < size; i++)
				m[sizeof *tmh + i] = tm_pattern(k, i);
			sge.length = sizeof *tmh + size;
		}
		if (ibv_post_send(qp, &wr, &badwr))
			die("post send %d", k);
	}

	deadline = now() + 60;
	while (nsend < count || nfin < nrndv) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);

		if (n < 0)
			die("poll CQ");
		if (n == 0) {
			if (now() > deadline) {
				errno = 0;
				die("timeout: %d of %d sends completed, %d of %d FINs received", nsend, count, nfin, nrndv);
			}
			usleep(50);
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			errno = 0;
			die("completion wr_id %llu status %s (%d)", (unsigned long long)wc.wr_id,
			    ibv_wc_status_str(wc.status), wc.status);
		}
		if (wc.wr_id < 1000) {
			nsend++;
			printf("send %llu %s ok\n", (unsigned long long)wc.wr_id, wc.wr_id % 2 ? "RNDV" : "EAGER");
			continue;
		}
		{
			struct ibv_tmh *fin = (struct ibv_tmh *)(fin_area + (wc.wr_id - 1000) * slot);
			int kk = ntohl(fin->app_ctx);
			char why[200] = "";

			nfin++;
			if (wc.opcode != IBV_WC_RECV)
				snprintf(why + strlen(why), sizeof why - strlen(why), " opcode %d, want RECV;", wc.opcode);
			if (wc.byte_len != sizeof *fin)
				snprintf(why + strlen(why), sizeof why - strlen(why), " byte_len %u, want %zu;",
					 wc.byte_len, sizeof *fin);
			if (fin->opcode != IBV_TMH_FIN)
				snprintf(why + strlen(why), sizeof why - strlen(why), " TMH opcode %d, want FIN;", fin->opcode);
			if (kk < 0 || kk >= count || kk % 2 == 0 || be64toh(fin->tag) != tm_tag(kk))
				snprintf(why + strlen(why), sizeof why - strlen(why),
					 " app_ctx %d tag 0x%016llx name no rendezvous;", kk,
					 (unsigned long long)be64toh(fin->tag));
			printf("fin %d %s%s\n", kk, why[0] ? "BAD:" : "ok", why);
			if (why[0])
				bad++;
		}
	}
	ch = 'd';
	xfer(fd, &ch, 1, 1);
	xfer(fd, &ch, 1, 0);
	close(fd);
	if (bad) {
		errno = 0;
		die("%d of %d FINs were wrong", bad, nrndv);
	}
	printf("shca-tm: OK sent %d EAGER and %d rendezvous messages of %d bytes, %d FINs, in %.3f s\n",
	       count - nrndv, nrndv, size, nrndv, now() - t0);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
