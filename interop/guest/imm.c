/*
 * shca-imm: SEND_WITH_IMM and RDMA_WRITE_WITH_IMM in both directions
 * between two RC or UC queue pairs, checked on the receiving side's
 * completions. perftest 4.5 has no immediate-data option; this fills the
 * gap in the softhca interop harness (interop/), whose host side speaks the
 * same protocol with softhca (interop/imm.go).
 *
 *   server: shca-imm [-d dev] [-g gidx] [-p port] [-t rc|uc] [-s size] [-m mtu] [-n count]
 *   client: shca-imm [same options] SERVER
 *
 * Each side sends count messages of size bytes. Message k is SEND_WITH_IMM
 * when k is even and RDMA_WRITE_WITH_IMM into slot k of the peer's write
 * area when k is odd; byte i holds imm_pattern(dir, k, i) and the immediate
 * is imm_value(dir, k), dir 0 for the client's messages and 1 for the
 * server's. Each side checks every receive completion: status, opcode
 * (IBV_WC_RECV with IBV_WC_WITH_IMM for a SEND, IBV_WC_RECV_RDMA_WITH_IMM
 * for a WRITE), immediate, byte_len, and every byte of the data (the
 * receive slot for a SEND, the write slot for a WRITE). One line per
 * completion, then "shca-imm: OK ..." and exit status 0 when everything
 * matched; "shca-imm: FAIL ..." and status 1 otherwise.
 *
 * Connection set-up over TCP: the client sends its line, the server
 * answers with its own, each "QPN PSN RKEY ADDR GID\n" (hex, GID as 32 hex
 * digits). Receives are posted before a side sends its line. The client,
 * once in RTS, sends 'g'; the server starts sending when it reads 'g' (the
 * client starts at once). At the end each side sends 'd' and waits for the
 * peer's, so neither tears its QP down while the other still needs it.
 */
#define _GNU_SOURCE
static const char *prog = "shca-imm";
#include "shca.h"

static int uc, size = 4096, count = 8, mtu = 1024;

static uint8_t imm_pattern(int dir, int k, int i)
{
	return (uint8_t)(i * 7 + (i >> 8) * 13 + k * 29 + dir * 101 + 1);
}

static uint32_t imm_value(int dir, int k)
{
	return 0x1A000000u | (uint32_t)dir << 16 | (uint32_t)k;
}

static const char *wc_opcode_str(enum ibv_wc_opcode o)
{
	switch (o) {
	case IBV_WC_SEND: return "SEND";
	case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_WC_RECV: return "RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
	default: return "other";
	}
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
	uint8_t *buf, *recv_area, *write_area, *send_area;
	int c, i, k, fd, mydir, peerdir, nrecv = 0, nsend = 0, bad = 0;
	size_t slot;
	char ch;
	double t0, deadline;

	while ((c = getopt(argc, argv, "d:g:p:t:s:m:n:")) != -1) {
		switch (c) {
		case 'd': dev_name = optarg; break;
		case 'g': gid_index = atoi(optarg); break;
		case 'p': tcp_port = atoi(optarg); break;
		case 't': uc = !strcmp(optarg, "uc"); break;
		case 's': size = atoi(optarg); break;
		case 'm': mtu = atoi(optarg); break;
		case 'n': count = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-d dev] [-g gidx] [-p port] [-t rc|uc] [-s size] [-m mtu] [-n count] [server]\n",
				argv[0]);
			return 2;
		}
	}
	if (optind < argc)
		servername = argv[optind];
	if (size < 1 || count < 1 || count > 1000)
		die("bad size %d or count %d", size, count);
	mydir = servername ? 0 : 1;
	peerdir = 1 - mydir;
	setvbuf(stdout, NULL, _IOLBF, 0);

	list = ibv_get_device_list(NULL);
	for (i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev_name))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		die("cannot open device %s", dev_name);
	slot = (size_t)size;
	buf = aligned_alloc(4096, (3 * slot * count + 4095) & ~(size_t)4095);
	if (!buf)
		die("out of memory");
	memset(buf, 0, 3 * slot * count);
	recv_area = buf;
	write_area = buf + slot * count;
	send_area = buf + 2 * slot * count;
	pd = ibv_alloc_pd(ctx);
	mr = pd ? ibv_reg_mr(pd, buf, 3 * slot * count, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	cq = ibv_create_cq(ctx, 2 * count + 2, NULL, NULL, 0);
	if (!mr || !cq)
		die("verbs set-up");
	{
		struct ibv_qp_init_attr ia = {
			.send_cq = cq, .recv_cq = cq, .qp_type = uc ? IBV_QPT_UC : IBV_QPT_RC,
			.cap = { .max_send_wr = count, .max_recv_wr = count, .max_send_sge = 1, .max_recv_sge = 1 },
		};
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_INIT, .port_num = 1,
			.qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
		};
		qp = ibv_create_qp(pd, &ia);
		if (!qp)
			die("create QP");
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			die("modify QP to INIT");
	}
	for (k = 0; k < count; k++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(recv_area + k * slot), .length = size, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 1000 + k, .sg_list = &sge, .num_sge = 1 }, *badwr;
		if (ibv_post_recv(qp, &wr, &badwr))
			die("post receive %d", k);
	}
	srand48(getpid() ^ time(NULL));
	me.qpn = qp->qp_num;
	me.psn = lrand48() & 0xffffff;
	me.rkey = mr->rkey;
	me.addr = (uintptr_t)write_area;
	if (ibv_query_gid(ctx, 1, gid_index, &me.gid))
		die("query GID %d", gid_index);

	fd = servername ? tcp_client(servername) : tcp_server();
	if (servername) {
		send_dest(fd, &me);
		recv_dest(fd, &peer);
	} else {
		recv_dest(fd, &peer);
	}
	{
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_RTR, .path_mtu = mtu_enum(mtu), .dest_qp_num = peer.qpn,
			.rq_psn = peer.psn, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
			.ah_attr = { .is_global = 1, .port_num = 1,
				     .grh = { .dgid = peer.gid, .sgid_index = gid_index, .hop_limit = 64 } },
		};
		int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (!uc)
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		if (ibv_modify_qp(qp, &a, mask))
			die("modify QP to RTR");
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = me.psn;
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
		if (!uc)
			mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
		if (ibv_modify_qp(qp, &a, mask))
			die("modify QP to RTS");
	}
	if (servername) {
		ch = 'g';
		xfer(fd, &ch, 1, 1);
	} else {
		send_dest(fd, &me);
		xfer(fd, &ch, 1, 0);
	}
	printf("%s %s: local QPN 0x%06x PSN 0x%06x, remote QPN 0x%06x PSN 0x%06x, size %d, count %d, MTU %d\n",
	       servername ? "client" : "server", uc ? "UC" : "RC", me.qpn, me.psn, peer.qpn, peer.psn, size, count, mtu);

	t0 = now();
	for (k = 0; k < count; k++) {
		uint8_t *p = send_area + k * slot;
		struct ibv_sge sge = { .addr = (uintptr_t)p, .length = size, .lkey = mr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = k, .sg_list = &sge, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED,
			.opcode = k % 2 ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_SEND_WITH_IMM,
			.imm_data = htonl(imm_value(mydir, k)),
		}, *badwr;
		if (k % 2) {
			wr.wr.rdma.remote_addr = peer.addr + k * slot;
			wr.wr.rdma.rkey = peer.rkey;
		}
		for (i = 0; i < size; i++)
			p[i] = imm_pattern(mydir, k, i);
		if (ibv_post_send(qp, &wr, &badwr))
			die("post send %d", k);
	}
	deadline = t0 + 60;
	while (nrecv < count || nsend < count) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);

		if (n < 0)
			die("poll CQ");
		if (n == 0) {
			if (now() > deadline) {
				errno = 0;
				die("timeout: %d of %d receives and %d of %d sends completed", nrecv, count, nsend, count);
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
			continue;
		}
		k = nrecv++;
		{
			int is_write = k % 2;
			enum ibv_wc_opcode want_op = is_write ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
			uint32_t imm = ntohl(wc.imm_data), want_imm = imm_value(peerdir, k);
			uint8_t *d = (is_write ? write_area : recv_area) + k * slot;
			int first_bad = -1;
			char why[200] = "";

			for (i = 0; i < size; i++)
				if (d[i] != imm_pattern(peerdir, k, i)) {
					first_bad = i;
					break;
				}
			if (wc.opcode != want_op)
				snprintf(why + strlen(why), sizeof why - strlen(why), " opcode %s, want %s;",
					 wc_opcode_str(wc.opcode), wc_opcode_str(want_op));
			if (!(wc.wc_flags & IBV_WC_WITH_IMM))
				snprintf(why + strlen(why), sizeof why - strlen(why), " no IBV_WC_WITH_IMM flag;");
			if (imm != want_imm)
				snprintf(why + strlen(why), sizeof why - strlen(why), " imm 0x%08x, want 0x%08x;",
					 imm, want_imm);
			if (wc.byte_len != (uint32_t)size)
				snprintf(why + strlen(why), sizeof why - strlen(why), " byte_len %u, want %d;",
					 wc.byte_len, size);
			if (wc.wr_id != (uint64_t)(1000 + k))
				snprintf(why + strlen(why), sizeof why - strlen(why), " wr_id %llu, want %d;",
					 (unsigned long long)wc.wr_id, 1000 + k);
			if (first_bad >= 0)
				snprintf(why + strlen(why), sizeof why - strlen(why),
					 " data byte %d is 0x%02x, want 0x%02x;", first_bad, d[first_bad],
					 imm_pattern(peerdir, k, first_bad));
			printf("recv %d %s imm=0x%08x len=%u %s%s\n", k, wc_opcode_str(wc.opcode), imm,
			       wc.byte_len, why[0] ? "BAD:" : "ok", why);
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
		die("%d of %d received messages were wrong", bad, count);
	}
	printf("shca-imm: OK %s %s: sent %d and received %d messages of %d bytes with immediate data in %.3f s\n",
	       servername ? "client" : "server", uc ? "UC" : "RC", count, count, size, now() - t0);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
