/*
 * uring_echo: single-threaded io_uring echo server, the practical ceiling of
 * the ringloop comparison (bench/README.md).
 *
 * Same semantics as the Go servers: every byte received on a connection is
 * written back on it, in order, until the peer closes. Mechanism:
 *   - one multishot ACCEPT on the listener;
 *   - one multishot RECV per connection, reading into a ring of provided
 *     buffers (buffer group 0), each buffer handed back to the kernel as soon
 *     as its bytes are copied out;
 *   - one SEND in flight per connection from a per-connection outbound
 *     buffer; bytes that arrive while a send is in flight accumulate in a
 *     second buffer that is sent next (the two swap), short sends continue
 *     where they stopped.
 *   - the ring is SINGLE_ISSUER|DEFER_TASKRUN where the kernel accepts it.
 *
 * Usage: uring_echo [-a 127.0.0.1] [-p 0] [-t max_seconds] [-n buffers] [-s buffer_size]
 * Prints "LISTEN host:port" once listening. Exits on SIGINT/SIGTERM, when the
 * parent dies, or after -t seconds (default 3600).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

enum { OP_ACCEPT = 1, OP_RECV = 2, OP_SEND = 3 };
#define MAX_FDS 65536
#define BGID 0

struct obuf {
	char *p;
	size_t len, cap;
};

struct conn {
	struct obuf acc;  /* bytes waiting for the next send */
	struct obuf fly;  /* bytes of the send in flight */
	size_t fly_off;
	int open, recv_on, send_on, closing;
};

static struct io_uring ring;
static struct io_uring_buf_ring *bufs;
static char *buf_mem;
static unsigned nbufs = 1024, buf_size = 4096;
static struct conn *conns;
static int lfd;

static uint64_t ud(int op, int fd) { return ((uint64_t)op << 32) | (uint32_t)fd; }

static struct io_uring_sqe *sqe_get(void)
{
	struct io_uring_sqe *s = io_uring_get_sqe(&ring);
	while (!s) {
		io_uring_submit(&ring);
		s = io_uring_get_sqe(&ring);
	}
	return s;
}

static void arm_accept(void)
{
	struct io_uring_sqe *s = sqe_get();
	io_uring_prep_multishot_accept(s, lfd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(s, ud(OP_ACCEPT, lfd));
}

static void arm_recv(int fd)
{
	struct io_uring_sqe *s = sqe_get();
	io_uring_prep_recv_multishot(s, fd, NULL, 0, 0);
	s->flags |= IOSQE_BUFFER_SELECT;
	s->buf_group = BGID;
	io_uring_sqe_set_data64(s, ud(OP_RECV, fd));
	conns[fd].recv_on = 1;
}

static void submit_send(int fd)
{
	struct conn *c = &conns[fd];
	struct io_uring_sqe *s = sqe_get();
	io_uring_prep_send(s, fd, c->fly.p + c->fly_off, c->fly.len - c->fly_off, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(s, ud(OP_SEND, fd));
	c->send_on = 1;
}

/* start_send swaps the accumulated bytes into flight if nothing is in flight. */
static void start_send(int fd)
{
	struct conn *c = &conns[fd];
	struct obuf t;
	if (c->send_on || c->acc.len == 0)
		return;
	t = c->fly;
	c->fly = c->acc;
	c->acc = t;
	c->acc.len = 0;
	c->fly_off = 0;
	submit_send(fd);
}

static void append(struct obuf *b, const char *p, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		if (!b->p) {
			perror("realloc");
			exit(1);
		}
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void recycle(unsigned bid)
{
	io_uring_buf_ring_add(bufs, buf_mem + (size_t)bid * buf_size, buf_size, bid,
			      io_uring_buf_ring_mask(nbufs), 0);
	io_uring_buf_ring_advance(bufs, 1);
}

/* maybe_close closes a connection marked closing once no operation is left. */
static void maybe_close(int fd)
{
	struct conn *c = &conns[fd];
	if (!c->closing || c->recv_on || c->send_on)
		return;
	close(fd);
	free(c->acc.p);
	free(c->fly.p);
	memset(c, 0, sizeof(*c));
}

static void begin_close(int fd)
{
	struct conn *c = &conns[fd];
	if (c->closing)
		return;
	c->closing = 1;
	if (c->recv_on)
		shutdown(fd, SHUT_RDWR); /* ends the multishot recv */
	maybe_close(fd);
}

static void on_accept(struct io_uring_cqe *cqe)
{
	int fd = cqe->res, one = 1;
	if (!(cqe->flags & IORING_CQE_F_MORE))
		arm_accept();
	if (fd < 0) {
		if (fd != -EMFILE && fd != -ENFILE && fd != -ECONNABORTED)
			fprintf(stderr, "accept: %s\n", strerror(-fd));
		return;
	}
	if (fd >= MAX_FDS) {
		close(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	memset(&conns[fd], 0, sizeof(conns[fd]));
	conns[fd].open = 1;
	arm_recv(fd);
}

static void on_recv(int fd, struct io_uring_cqe *cqe)
{
	struct conn *c = &conns[fd];
	int more = cqe->flags & IORING_CQE_F_MORE;
	if (!more)
		c->recv_on = 0;
	if (cqe->res > 0 && (cqe->flags & IORING_CQE_F_BUFFER)) {
		unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
		if (!c->closing)
			append(&c->acc, buf_mem + (size_t)bid * buf_size, (size_t)cqe->res);
		recycle(bid);
		if (!c->closing) {
			start_send(fd);
			if (!more)
				arm_recv(fd);
		}
	} else if (cqe->res == -ENOBUFS && !c->closing) {
		if (!more)
			arm_recv(fd); /* buffers come back as soon as their bytes are copied */
	} else if (cqe->res == 0 && !c->closing) {
		/* peer closed: flush what is queued, then close */
		c->closing = 1;
	} else if (cqe->res < 0 && !c->closing) {
		begin_close(fd);
	}
	if (c->closing && !c->send_on && c->acc.len > 0 && cqe->res == 0)
		start_send(fd);
	maybe_close(fd);
}

static void on_send(int fd, struct io_uring_cqe *cqe)
{
	struct conn *c = &conns[fd];
	c->send_on = 0;
	if (cqe->res < 0) {
		c->acc.len = 0;
		begin_close(fd);
		maybe_close(fd);
		return;
	}
	c->fly_off += (size_t)cqe->res;
	if (c->fly_off < c->fly.len) {
		submit_send(fd);
		return;
	}
	c->fly.len = 0;
	start_send(fd);
	maybe_close(fd);
}

int main(int argc, char **argv)
{
	const char *host = "127.0.0.1";
	int port = 0, maxsec = 3600, opt, one = 1, ret;
	struct sockaddr_in sa;
	socklen_t salen = sizeof(sa);
	struct io_uring_params p;
	struct io_uring_buf_reg reg;

	while ((opt = getopt(argc, argv, "a:p:t:n:s:")) != -1) {
		switch (opt) {
		case 'a': host = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 't': maxsec = atoi(optarg); break;
		case 'n': nbufs = (unsigned)atoi(optarg); break;
		case 's': buf_size = (unsigned)atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-a host] [-p port] [-t max_seconds] [-n buffers] [-s buffer_size]\n", argv[0]);
			return 2;
		}
	}
	if (nbufs == 0 || (nbufs & (nbufs - 1)) || nbufs > 32768 || buf_size == 0) {
		fprintf(stderr, "buffers must be a power of two up to 32768\n");
		return 2;
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGPIPE, SIG_IGN);
	alarm((unsigned)maxsec);

	conns = calloc(MAX_FDS, sizeof(*conns));
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (!conns || lfd < 0) {
		perror("socket");
		return 1;
	}
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(lfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
		fprintf(stderr, "bad address %s\n", host);
		return 2;
	}
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4096) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &salen) < 0) {
		perror("listen");
		return 1;
	}

	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE;
	p.cq_entries = 16384;
	ret = io_uring_queue_init_params(4096, &ring, &p);
	if (ret == -EINVAL) {
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_CQSIZE;
		p.cq_entries = 16384;
		ret = io_uring_queue_init_params(4096, &ring, &p);
	}
	if (ret < 0) {
		fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-ret));
		return 1;
	}

	bufs = mmap(NULL, nbufs * sizeof(struct io_uring_buf), PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	buf_mem = malloc((size_t)nbufs * buf_size);
	if (bufs == MAP_FAILED || !buf_mem) {
		perror("buffers");
		return 1;
	}
	/* Touch the pool now so that it counts in the baseline RSS, not in the
	 * per-connection memory the harness derives from RSS growth. A non-zero
	 * fill: gcc turns malloc+memset(0) into calloc, which touches nothing. */
	memset(buf_mem, 0x5a, (size_t)nbufs * buf_size);
	io_uring_buf_ring_init(bufs);
	memset(&reg, 0, sizeof(reg));
	reg.ring_addr = (unsigned long)bufs;
	reg.ring_entries = nbufs;
	reg.bgid = BGID;
	ret = io_uring_register_buf_ring(&ring, &reg, 0);
	if (ret < 0) {
		fprintf(stderr, "io_uring_register_buf_ring: %s\n", strerror(-ret));
		return 1;
	}
	for (unsigned i = 0; i < nbufs; i++)
		io_uring_buf_ring_add(bufs, buf_mem + (size_t)i * buf_size, buf_size, i,
				      io_uring_buf_ring_mask(nbufs), (int)i);
	io_uring_buf_ring_advance(bufs, (int)nbufs);

	arm_accept();
	printf("LISTEN %s:%d\n", host, ntohs(sa.sin_port));
	fflush(stdout);

	for (;;) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		ret = io_uring_submit_and_wait(&ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
			fprintf(stderr, "io_uring_submit_and_wait: %s\n", strerror(-ret));
			return 1;
		}
		io_uring_for_each_cqe(&ring, head, cqe) {
			uint64_t d = io_uring_cqe_get_data64(cqe);
			int op = (int)(d >> 32), fd = (int)(uint32_t)d;
			seen++;
			switch (op) {
			case OP_ACCEPT: on_accept(cqe); break;
			case OP_RECV: on_recv(fd, cqe); break;
			case OP_SEND: on_send(fd, cqe); break;
			}
		}
		io_uring_cq_advance(&ring, seen);
	}
}
