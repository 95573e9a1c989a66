// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * sockops_load: attach the tcp_rto sock_ops program for one host.
 *
 *   sockops_load attach --cgroup DIR --netns NAME|PATH --pin-dir PINDIR
 *                [--init-rto-jiffies N] [--rto-min-us N] [--delack-max-us N]
 *                [--sndcwnd-clamp SEGMENTS] [--pacing]
 *   sockops_load stats --pin-dir PINDIR    (counters of the attached program)
 *
 * attach: reads the netns cookie of the host's network namespace (a socket made
 * there, SO_NETNS_COOKIE), sets the program's rodata, loads it, attaches it to
 * the cgroup v2 DIR through a bpf_link (BPF_F_ALLOW_MULTI) and pins the link at
 * PINDIR/link and its counters map at PINDIR/stats (PINDIR is created; bpffs
 * names cannot contain dots). Removing PINDIR detaches and frees it. Prints
 * one JSON line; errors name the failing step on stderr (exit 1; usage exit 2).
 * Only the network namespace is switched (setns CLONE_NEWNET), never the mount
 * namespace, so bpffs pins stay visible.
 *
 * --pacing turns TCP's internal pacing on for the host's connections (the program sets
 * SO_MAX_PACING_RATE = TCP_RTO_MAX_PACING_RATE when they are established; tcp_rto.bpf.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "tcp_rto.h"
#include "tcp_rto.skel.h"

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif

static void fail(const char *fmt, ...)
{
	va_list ap;

	fputs("sockops_load: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int usage(void)
{
	fputs("usage:\n"
	      "  sockops_load attach --cgroup DIR --netns NAME|PATH --pin-dir PINDIR\n"
	      "               [--init-rto-jiffies N] [--rto-min-us N] [--delack-max-us N]\n"
	      "               [--sndcwnd-clamp SEGMENTS] [--pacing]\n"
	      "  sockops_load stats --pin-dir PINDIR\n", stderr);
	return 2;
}

static int parse_u32(const char *opt, const char *s, unsigned long max, __u32 *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || !*s || *end || s[0] == '-' || v > max) {
		fail("--%s %s: expected an integer in 0..%lu", opt, s, max);
		return -1;
	}
	*out = (__u32)v;
	return 0;
}

static int netns_cookie(const char *netns, __u64 *cookie)
{
	char path[PATH_MAX];
	socklen_t len = sizeof(*cookie);
	int fd, self, sock, ret = -1;

	if (strchr(netns, '/'))
		snprintf(path, sizeof(path), "%s", netns);
	else
		snprintf(path, sizeof(path), "/run/netns/%s", netns);
	/* Come back afterwards: bpffs refuses pins from a foreign network namespace. */
	self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || self < 0) {
		fail("--netns %s: cannot open %s: %s", netns, fd < 0 ? path : "/proc/self/ns/net",
		     strerror(errno));
		goto out;
	}
	if (setns(fd, CLONE_NEWNET)) {
		fail("--netns %s: setns: %s", netns, strerror(errno));
		goto out;
	}
	sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0 || getsockopt(sock, SOL_SOCKET, SO_NETNS_COOKIE, cookie, &len))
		fail("--netns %s: reading SO_NETNS_COOKIE: %s (needs Linux >= 5.14)", netns,
		     strerror(errno));
	else
		ret = 0;
	if (sock >= 0)
		close(sock);
	if (setns(self, CLONE_NEWNET)) {
		fail("returning to the original network namespace: %s", strerror(errno));
		ret = -1;
	}
out:
	if (fd >= 0)
		close(fd);
	if (self >= 0)
		close(self);
	return ret;
}

static int cmd_attach(const char *cgroup, const char *netns, const char *pin,
		      __u32 init_rto, __u32 rto_min, __u32 delack_max, __u32 cwnd_clamp,
		      __u32 pacing)
{
	char stats_pin[PATH_MAX], link_pin[PATH_MAX];
	struct tcp_rto_bpf *skel;
	struct bpf_link *link;
	__u64 cookie = 0;
	int cg, err;

	if (!cgroup || !netns || !pin)
		return usage();
	if (snprintf(stats_pin, sizeof(stats_pin), "%s/stats", pin) >= (int)sizeof(stats_pin) ||
	    snprintf(link_pin, sizeof(link_pin), "%s/link", pin) >= (int)sizeof(link_pin)) {
		fail("--pin-dir %s: path too long", pin);
		return 2;
	}
	if (mkdir(pin, 0700)) {
		fail("--pin-dir %s: %s%s", pin, strerror(errno), errno == EEXIST ?
		     " (not replacing another attachment)" : " (is its parent on a bpffs?)");
		return 1;
	}
	if (netns_cookie(netns, &cookie))
		return 1;
	cg = open(cgroup, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg < 0) {
		fail("--cgroup %s: %s", cgroup, strerror(errno));
		return 1;
	}
	skel = tcp_rto_bpf__open();
	if (!skel) {
		fail("opening the embedded tcp_rto object: %s", strerror(errno));
		close(cg);
		return 1;
	}
	skel->rodata->tb_netns_cookie = cookie;
	skel->rodata->tb_init_rto_jiffies = init_rto;
	skel->rodata->tb_rto_min_us = rto_min;
	skel->rodata->tb_delack_max_us = delack_max;
	skel->rodata->tb_sndcwnd_clamp = cwnd_clamp;
	skel->rodata->tb_pacing = pacing;
	err = tcp_rto_bpf__load(skel);
	if (err) {
		fail("loading tcp_rto (verifier or kernel refused it): %s", strerror(-err));
		goto out;
	}
	link = bpf_program__attach_cgroup(skel->progs.tcp_rto, cg);
	err = libbpf_get_error(link);
	if (err) {
		fail("attaching to cgroup %s: %s (is it a cgroup v2 directory?)", cgroup,
		     strerror(-err));
		goto out;
	}
	err = bpf_map__pin(skel->maps.tcp_rto_stats, stats_pin);
	if (!err)
		err = bpf_link__pin(link, link_pin);
	if (err) {
		fail("pinning in %s: %s", pin, strerror(-err));
		unlink(stats_pin);
		bpf_link__destroy(link);
		goto out;
	}
	printf("{\"pin_dir\": \"%s\", \"netns_cookie\": %llu, "
	       "\"init_rto_jiffies\": %u, \"rto_min_us\": %u, \"delack_max_us\": %u, "
	       "\"sndcwnd_clamp\": %u, \"pacing\": %s, \"max_pacing_rate\": %u}\n",
	       pin, (unsigned long long)cookie, init_rto, rto_min, delack_max, cwnd_clamp,
	       pacing ? "true" : "false", pacing ? TCP_RTO_MAX_PACING_RATE : 0);
	bpf_link__disconnect(link);
	bpf_link__destroy(link);
out:
	tcp_rto_bpf__destroy(skel);
	close(cg);
	if (err)
		rmdir(pin);
	return err ? 1 : 0;
}

static int cmd_stats(const char *pin)
{
	static const char *names[TCP_RTO_STAT_MAX] = {
		"timeout_init", "rto_min", "delack_max", "setsockopt_errors", "sndcwnd_clamp",
		"pacing"};
	char stats_pin[PATH_MAX];
	int fd;

	if (!pin)
		return usage();
	snprintf(stats_pin, sizeof(stats_pin), "%s/stats", pin);
	fd = bpf_obj_get(stats_pin);
	if (fd < 0) {
		fail("--pin-dir %s: no stats map at %s: %s", pin, stats_pin, strerror(errno));
		return 1;
	}
	putchar('{');
	for (__u32 i = 0; i < TCP_RTO_STAT_MAX; i++) {
		__u64 v = 0;

		if (bpf_map_lookup_elem(fd, &i, &v)) {
			fail("reading %s: %s", stats_pin, strerror(errno));
			close(fd);
			return 1;
		}
		printf("%s\"%s\": %llu", i ? ", " : "", names[i], (unsigned long long)v);
	}
	puts("}");
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"cgroup", required_argument, NULL, 'c'},
		{"netns", required_argument, NULL, 'n'},
		{"pin-dir", required_argument, NULL, 'p'},
		{"init-rto-jiffies", required_argument, NULL, 'i'},
		{"rto-min-us", required_argument, NULL, 'm'},
		{"delack-max-us", required_argument, NULL, 'd'},
		{"sndcwnd-clamp", required_argument, NULL, 'w'},
		{"pacing", no_argument, NULL, 'P'},
		{NULL, 0, NULL, 0},
	};
	const char *cgroup = NULL, *netns = NULL, *pin = NULL, *cmd;
	__u32 init_rto = 0, rto_min = 0, delack_max = 0, cwnd_clamp = 0, pacing = 0;
	int c;

	if (argc < 2)
		return usage();
	cmd = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': cgroup = optarg; break;
		case 'n': netns = optarg; break;
		case 'p': pin = optarg; break;
		case 'i': if (parse_u32("init-rto-jiffies", optarg, 120000, &init_rto)) return 2; break;
		case 'm': if (parse_u32("rto-min-us", optarg, TCP_RTO_MIN_US_MAX, &rto_min)) return 2; break;
		case 'd': if (parse_u32("delack-max-us", optarg, TCP_DELACK_MAX_US_MAX, &delack_max)) return 2; break;
		case 'w': if (parse_u32("sndcwnd-clamp", optarg, TCP_SNDCWND_CLAMP_MAX, &cwnd_clamp)) return 2; break;
		case 'P': pacing = 1; break;
		default: return usage();
		}
	}
	if (optind != argc)
		return usage();
	libbpf_set_strict_mode(LIBBPF_STRICT_ALL);
	if (!strcmp(cmd, "attach"))
		return cmd_attach(cgroup, netns, pin, init_rto, rto_min, delack_max, cwnd_clamp,
				  pacing);
	if (!strcmp(cmd, "stats"))
		return cmd_stats(pin);
	return usage();
}
