// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * cwndtrace: load and attach the live TCP state tracer (cwndtrace.bpf.c, embedded as a
 * libbpf skeleton) and stream its events to standard output.
 *
 *   cwndtrace [--netns-inum N] [--port N] [--changes] [--arm]
 *
 * --netns-inum: only sockets of the network namespace with this inode number (what
 * sk->__sk_common.skc_net->ns.inum holds: stat(2) of /run/netns/NAME); --port: only
 * sockets with this local or remote port; --changes: an ACK event only when cwnd,
 * ssthresh, the congestion state or the reordering degree changed since the socket's
 * previous one; --arm: also every (re)arming of the retransmission timer.
 *
 * Output: binary struct cwnd_event records (cwndtrace.h, sizeof = 88 bytes, host byte
 * order). The first is CWND_EV_READY, written once every program is attached; then the
 * events as they are consumed, and CWND_EV_LOST (ts_ns: the number of events the ring
 * buffer had no room for, since the start) whenever that number has grown; a clean stop (standard input closed, SIGTERM or SIGINT)
 * drains the ring buffer and writes CWND_EV_END, whose ts_ns is the number of events the
 * ring buffer had no room for. Errors go to standard error naming the failing step
 * (exit 1; usage exit 2).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "cwndtrace.h"
#include "cwndtrace.skel.h"

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

static void fail(const char *fmt, ...)
{
	va_list ap;

	fputs("cwndtrace: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int usage(void)
{
	fputs("usage: cwndtrace [--netns-inum N] [--port N] [--changes] [--arm]\n", stderr);
	return 2;
}

static int parse_ul(const char *opt, const char *s, unsigned long max, unsigned long *out)
{
	char *end;

	errno = 0;
	*out = strtoul(s, &end, 10);
	if (errno || !*s || *end || s[0] == '-' || *out > max) {
		fail("--%s %s: expected an integer in 0..%lu", opt, s, max);
		return -1;
	}
	return 0;
}

static int write_record(const struct cwnd_event *e)
{
	if (fwrite(e, sizeof(*e), 1, stdout) != 1) {
		fail("writing to standard output: %s", strerror(errno));
		return -1;
	}
	return 0;
}

static int on_event(void *ctx, void *data, size_t size)
{
	(void)ctx;
	if (size < sizeof(struct cwnd_event))
		return 0;
	return write_record(data);
}

static __u64 lost_events(struct cwndtrace_bpf *skel)
{
	int ncpu = libbpf_num_possible_cpus();
	__u64 sum = 0, *vals;
	__u32 zero = 0;

	if (ncpu <= 0)
		return 0;
	vals = calloc(ncpu, sizeof(*vals));
	if (vals && !bpf_map_lookup_elem(bpf_map__fd(skel->maps.cwndtrace_lost), &zero, vals))
		for (int i = 0; i < ncpu; i++)
			sum += vals[i];
	free(vals);
	return sum;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"netns-inum", required_argument, NULL, 'n'},
		{"port", required_argument, NULL, 'p'},
		{"changes", no_argument, NULL, 'c'},
		{"arm", no_argument, NULL, 'a'},
		{NULL, 0, NULL, 0},
	};
	unsigned long netns = 0, port = 0;
	int changes = 0, arm = 0, c, err = 1;
	struct cwndtrace_bpf *skel = NULL;
	struct ring_buffer *rb = NULL;
	struct cwnd_event mark = {};
	__u64 lost = 0, now_lost;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (parse_ul("netns-inum", optarg, 0xFFFFFFFFul, &netns))
				return 2;
			break;
		case 'p':
			if (parse_ul("port", optarg, 65535, &port))
				return 2;
			break;
		case 'c':
			changes = 1;
			break;
		case 'a':
			arm = 1;
			break;
		default:
			return usage();
		}
	}
	if (optind != argc)
		return usage();
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGPIPE, SIG_IGN);

	skel = cwndtrace_bpf__open();
	if (!skel) {
		fail("opening the embedded cwndtrace object: %s", strerror(errno));
		return 1;
	}
	skel->rodata->tb_netns = (__u32)netns;
	skel->rodata->tb_port = (__u16)port;
	skel->rodata->tb_changes = (__u8)changes;
	bpf_program__set_autoload(skel->progs.cwnd_arm, arm);
	err = cwndtrace_bpf__load(skel);
	if (err) {
		fail("loading (the verifier or the kernel refused it; needs root and a kernel with BTF): %s",
		     strerror(-err));
		goto out;
	}
	err = cwndtrace_bpf__attach(skel);
	if (err) {
		fail("attaching the tracepoints and kprobes: %s", strerror(-err));
		goto out;
	}
	rb = ring_buffer__new(bpf_map__fd(skel->maps.cwndtrace_events), on_event, NULL, NULL);
	if (!rb) {
		err = -errno;
		fail("opening the ring buffer: %s", strerror(errno));
		goto out;
	}
	mark.type = CWND_EV_READY;
	if (write_record(&mark) || fflush(stdout)) {
		err = -EIO;
		goto out;
	}
	struct pollfd fds[2] = {
		{.fd = STDIN_FILENO, .events = POLLIN},
		{.fd = ring_buffer__epoll_fd(rb), .events = POLLIN},
	};
	while (!stopping) {
		int n = poll(fds, 2, 100);

		if (n < 0 && errno != EINTR) {
			err = -errno;
			fail("poll: %s", strerror(errno));
			goto out;
		}
		if (n > 0 && fds[0].revents) {
			char buf[64];

			if (read(STDIN_FILENO, buf, sizeof(buf)) <= 0)
				stopping = 1;	/* the reader closed its end: stop */
		}
		err = ring_buffer__consume(rb);
		if (err < 0) {
			fail("reading the ring buffer: %s", strerror(-err));
			goto out;
		}
		now_lost = lost_events(skel);
		if (now_lost != lost) {
			lost = now_lost;
			mark.type = CWND_EV_LOST;
			mark.ts_ns = lost;
			if (write_record(&mark)) {
				err = -EIO;
				goto out;
			}
		}
		if (fflush(stdout)) {
			err = -EIO;
			goto out;
		}
	}
	err = ring_buffer__consume(rb);
	if (err < 0) {
		fail("draining the ring buffer: %s", strerror(-err));
		goto out;
	}
	mark.type = CWND_EV_END;
	mark.ts_ns = lost_events(skel);
	err = write_record(&mark) || fflush(stdout) ? -EIO : 0;
out:
	ring_buffer__free(rb);
	cwndtrace_bpf__destroy(skel);
	return err ? 1 : 0;
}
