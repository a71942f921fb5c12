/*
 * shca.h: what the softhca interop guest programs (imm.c, tm.c) share:
 * failing with a message, the TCP connection and its "QPN PSN RKEY ADDR
 * GID" lines (interop/imm.go speaks the same), MTU values and a clock.
 * Each program defines prog (its name) before including this file.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A program uses some of these only. */
#pragma GCC diagnostic ignored "-Wunused-function"

static const char *dev_name = "rxe0";
static int gid_index = 1, tcp_port = 18600;

static void die(const char *fmt, ...)
{
	va_list ap;
	int e = errno;

	va_start(ap, fmt);
	fprintf(stdout, "%s: FAIL ", prog);
	vfprintf(stdout, fmt, ap);
	if (e)
		fprintf(stdout, " (errno %d: %s)", e, strerror(e));
	fprintf(stdout, "\n");
	va_end(ap);
	exit(1);
}

static void xfer(int fd, void *p, size_t n, int wr)
{
	size_t off = 0;

	while (off < n) {
		ssize_t r = wr ? write(fd, (char *)p + off, n - off) : read(fd, (char *)p + off, n - off);
		if (r <= 0)
			die("TCP %s", wr ? "write" : "read (peer gone?)");
		off += r;
	}
}

static int tcp_client(const char *host)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res;
	char port[16];
	int fd;

	snprintf(port, sizeof port, "%d", tcp_port);
	if (getaddrinfo(host, port, &hints, &res))
		die("cannot resolve %s", host);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen))
		die("cannot connect to %s:%d", host, tcp_port);
	freeaddrinfo(res);
	return fd;
}

static int tcp_server(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(tcp_port) };
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0), fd;

	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(l, (struct sockaddr *)&sa, sizeof sa) || listen(l, 1))
		die("cannot listen on TCP port %d", tcp_port);
	printf("listening on TCP port %d\n", tcp_port);
	fflush(stdout);
	fd = accept(l, NULL, NULL);
	if (fd < 0)
		die("accept");
	close(l);
	return fd;
}

struct dest {
	uint32_t qpn, psn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

#define LINE 96

static void send_dest(int fd, const struct dest *d)
{
	char line[LINE] = { 0 }, *p;
	int i;

	p = line + sprintf(line, "%06x %06x %08x %016llx ", d->qpn, d->psn, d->rkey,
			   (unsigned long long)d->addr);
	for (i = 0; i < 16; i++)
		p += sprintf(p, "%02x", d->gid.raw[i]);
	*p = '\n';
	xfer(fd, line, LINE, 1);
}

static void recv_dest(int fd, struct dest *d)
{
	char line[LINE], gid[33];
	unsigned long long addr;
	int i;

	xfer(fd, line, LINE, 0);
	line[LINE - 1] = 0;
	if (sscanf(line, "%x %x %x %llx %32s", &d->qpn, &d->psn, &d->rkey, &addr, gid) != 5 ||
	    strlen(gid) != 32)
		die("bad peer line %.60s", line);
	d->addr = addr;
	for (i = 0; i < 16; i++) {
		unsigned v;
		sscanf(gid + 2 * i, "%2x", &v);
		d->gid.raw[i] = v;
	}
}

static enum ibv_mtu mtu_enum(int m)
{
	switch (m) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	case 4096: return IBV_MTU_4096;
	}
	errno = 0;
	die("bad MTU %d", m);
	return 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}
