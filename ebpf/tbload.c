// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * tbload: the libbpf loader of optical-tcp-testbed.
 *
 * An argument-list interface (no shell parsing), one JSON line on stdout on
 * success, an error naming the failing step on stderr and a non-zero exit
 * status on failure (1: runtime error, 2: usage error).
 *
 *   tbload attach --obj FILE --prog NAME --dev IFNAME --dir ingress|egress
 *                 --pin-dir DIR [--netns NAME|PATH] [--set VAR=VALUE ...]
 *   tbload detach --dev IFNAME --dir ingress|egress --handle H --priority P
 *                 [--netns NAME|PATH] [--pin-dir DIR]
 *   tbload test-run --obj FILE --prog NAME --pin-dir DIR
 *                 --packet FILE|LEN [--repeat N] [--set VAR=VALUE ...]
 *   tbload dump-portstat --map PINNED_PATH
 *
 * Every non-internal map of the object is pinned at DIR/maps/<map name>; an
 * existing pin is reused, so all loads of one run share their maps.
 * Programs attached with `attach` are pinned at DIR/progs/<dev>-<dir>.
 *
 * --netns switches only the network namespace (setns(CLONE_NEWNET)) before
 * talking netlink. Use it rather than `ip netns exec`: that one also
 * remounts /sys in a private mount namespace, so the bpffs of the host
 * (and every pin) is invisible there.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <linux/bpf.h>
#include <linux/magic.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "portstat.h"
#include "optswitch.h"

#ifndef BPF_FS_MAGIC
#define BPF_FS_MAGIC 0xcafe4a11
#endif

#define MAX_SETS 32
#define MAX_DEVS 64
#define LOAD_ATTEMPTS 5

struct opts {
	const char *obj;
	const char *prog;
	const char *dev;
	const char *dir;
	const char *pin_dir;
	const char *netns;
	const char *packet;
	const char *map;
	const char *file;
	const char *prog2;
	const char *devs[MAX_DEVS];
	int ndevs;
	const char *sets[MAX_SETS];
	int nsets;
	long repeat;
	long long handle;
	long long priority;
	bool verbose;
};

static bool verbose;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;

	fputs("tbload: error: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level == LIBBPF_DEBUG && !verbose)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

static void usage(FILE *f)
{
	fputs("usage:\n"
	      "  tbload attach --obj FILE --prog NAME --dev IFNAME --dir ingress|egress\n"
	      "                --pin-dir DIR [--netns NAME|PATH] [--set VAR=VALUE ...]\n"
	      "  tbload detach --dev IFNAME --dir ingress|egress --handle H --priority P\n"
	      "                [--netns NAME|PATH] [--pin-dir DIR]\n"
	      "  tbload test-run --obj FILE --prog NAME --pin-dir DIR --packet FILE|LEN\n"
	      "                [--repeat N] [--set VAR=VALUE ...]\n"
	      "  tbload dump-portstat --map PINNED_PATH\n"
	      "  tbload load --obj FILE --prog NAME --pin-dir DIR [--set VAR=VALUE ...]\n"
	      "  tbload attach-node --obj FILE --prog INGRESS --prog2 EGRESS --pin-dir DIR\n"
	      "                --dev IFNAME [--dev IFNAME ...] [--netns NAME|PATH] [--set ...]\n"
	      "  tbload map-update --map PINNED_PATH --file FILE   (lines: KEYHEX VALUEHEX)\n"
	      "  tbload map-dump --map PINNED_PATH [--file KEYS]   (lines: KEYHEX VALUEHEX;\n"
	      "                KEYS, one KEYHEX per line, limits it to those keys)\n"
	      "  tbload test-trace --obj FILE --prog NAME --pin-dir DIR --trace FILE [--set ...]\n"
	      "options: -v/--verbose prints libbpf debug output (verifier log) on stderr\n",
	      f);
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "obj", required_argument, NULL, 'o' },
		{ "prog", required_argument, NULL, 'p' },
		{ "dev", required_argument, NULL, 'd' },
		{ "dir", required_argument, NULL, 'D' },
		{ "pin-dir", required_argument, NULL, 'P' },
		{ "netns", required_argument, NULL, 'n' },
		{ "set", required_argument, NULL, 's' },
		{ "packet", required_argument, NULL, 'k' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "map", required_argument, NULL, 'm' },
		{ "file", required_argument, NULL, 'f' },
		{ "trace", required_argument, NULL, 'f' },
		{ "prog2", required_argument, NULL, 'q' },
		{ "handle", required_argument, NULL, 'H' },
		{ "priority", required_argument, NULL, 'R' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	char *end;
	int c;

	memset(o, 0, sizeof(*o));
	o->repeat = 1;
	o->handle = -1;
	o->priority = -1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': o->obj = optarg; break;
		case 'p': o->prog = optarg; break;
		case 'd':
			o->dev = optarg;
			if (o->ndevs == MAX_DEVS) {
				fail("too many --dev options (at most %d)", MAX_DEVS);
				return -1;
			}
			o->devs[o->ndevs++] = optarg;
			break;
		case 'f': o->file = optarg; break;
		case 'q': o->prog2 = optarg; break;
		case 'D': o->dir = optarg; break;
		case 'P': o->pin_dir = optarg; break;
		case 'n': o->netns = optarg; break;
		case 'k': o->packet = optarg; break;
		case 'm': o->map = optarg; break;
		case 'v': o->verbose = true; break;
		case 's':
			if (o->nsets == MAX_SETS) {
				fail("too many --set options (at most %d)", MAX_SETS);
				return -1;
			}
			o->sets[o->nsets++] = optarg;
			break;
		case 'r':
			errno = 0;
			o->repeat = strtol(optarg, &end, 10);
			if (errno || *end || o->repeat < 1 || o->repeat > INT_MAX) {
				fail("--repeat %s: expected an integer >= 1", optarg);
				return -1;
			}
			break;
		case 'H':
		case 'R': {
			long long v;

			errno = 0;
			v = strtoll(optarg, &end, 0);
			if (errno || *end || v < 0 || v > (c == 'H' ? UINT32_MAX : UINT16_MAX)) {
				fail("--%s %s: expected an integer in 0..%u", c == 'H' ? "handle" : "priority",
				     optarg, c == 'H' ? UINT32_MAX : UINT16_MAX);
				return -1;
			}
			if (c == 'H')
				o->handle = v;
			else
				o->priority = v;
			break;
		}
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (optind != argc) {
		fail("unexpected argument '%s'", argv[optind]);
		return -1;
	}
	verbose = o->verbose;
	return 0;
}

static int need(const char *val, const char *name, const char *cmd)
{
	if (val)
		return 0;
	fail("%s needs %s", cmd, name);
	return -1;
}

static int parse_dir(const char *dir, enum bpf_tc_attach_point *ap)
{
	if (!strcmp(dir, "ingress"))
		*ap = BPF_TC_INGRESS;
	else if (!strcmp(dir, "egress"))
		*ap = BPF_TC_EGRESS;
	else {
		fail("--dir %s: expected ingress or egress", dir);
		return -1;
	}
	return 0;
}

static int check_dev_name(const char *dev)
{
	if (!*dev || strlen(dev) >= IFNAMSIZ || strchr(dev, '/') || dev[0] == '.') {
		fail("--dev '%s': not a valid interface name (1-%d characters, no '/')", dev,
		     IFNAMSIZ - 1);
		return -1;
	}
	return 0;
}

/* mkdir -p; every created component must end up on a bpffs. */
static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(buf)) {
		fail("path '%s' is empty or too long", path);
		return -1;
	}
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; ; p++) {
		if (*p == '/' || *p == '\0') {
			char saved = *p;

			*p = '\0';
			if (mkdir(buf, 0700) && errno != EEXIST) {
				fail("creating directory %s: %s", buf, strerror(errno));
				return -1;
			}
			*p = saved;
			if (saved == '\0')
				break;
		}
	}
	return 0;
}

static int prepare_pin_dir(const char *pin_dir)
{
	char maps[PATH_MAX], progs[PATH_MAX];
	struct statfs st;

	if (pin_dir[0] != '/') {
		fail("--pin-dir %s: must be an absolute path on a bpffs", pin_dir);
		return -1;
	}
	/* Check the deepest existing ancestor first, so that a missing bpffs is
	 * reported as such rather than as a failing mkdir. */
	snprintf(maps, sizeof(maps), "%s", pin_dir);
	while (statfs(maps, &st)) {
		char *slash = strrchr(maps, '/');

		if (errno != ENOENT || !slash) {
			fail("statfs %s: %s", maps, strerror(errno));
			return -1;
		}
		if (slash == maps)
			slash[1] = '\0';
		else
			*slash = '\0';
	}
	if ((unsigned long)st.f_type == BPF_FS_MAGIC) {
		if (mkdir_p(pin_dir))
			return -1;
		if (statfs(pin_dir, &st)) {
			fail("statfs %s: %s", pin_dir, strerror(errno));
			return -1;
		}
	}
	if ((unsigned long)st.f_type != BPF_FS_MAGIC) {
		fail("--pin-dir %s is not on a bpf filesystem (mount -t bpf bpf /sys/fs/bpf; "
		     "under `ip netns exec` /sys is remounted and bpffs is hidden: use --netns)",
		     pin_dir);
		return -1;
	}
	snprintf(maps, sizeof(maps), "%s/maps", pin_dir);
	snprintf(progs, sizeof(progs), "%s/progs", pin_dir);
	if (mkdir_p(maps) || mkdir_p(progs))
		return -1;
	return 0;
}

/* Switch to a network namespace given by name (/run/netns/NAME) or path. */
static int enter_netns(const char *netns)
{
	char path[PATH_MAX];
	int fd;

	if (strchr(netns, '/'))
		snprintf(path, sizeof(path), "%s", netns);
	else
		snprintf(path, sizeof(path), "/run/netns/%s", netns);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fail("opening network namespace %s: %s", path, strerror(errno));
		return -1;
	}
	if (setns(fd, CLONE_NEWNET)) {
		fail("entering network namespace %s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

static bool has_suffix(const char *s, const char *sfx)
{
	size_t ls = strlen(s), lx = strlen(sfx);

	return ls >= lx && !strcmp(s + ls - lx, sfx);
}

static void list_rodata_vars(struct btf *btf, const struct btf_type *sec)
{
	const struct btf_var_secinfo *vsi = btf_var_secinfos(sec);

	fputs("tbload: variables in .rodata:", stderr);
	for (int i = 0; i < btf_vlen(sec); i++, vsi++) {
		const struct btf_type *var = btf__type_by_id(btf, vsi->type);

		fprintf(stderr, " %s(u%u)", btf__name_by_offset(btf, var->name_off),
			vsi->size * 8);
	}
	fputc('\n', stderr);
}

/* Set a `const volatile` variable in .rodata, sized by its BTF. */
static int set_rodata_var(struct bpf_object *obj, const char *assign)
{
	const struct btf_var_secinfo *vsi;
	const struct btf_type *sec;
	struct bpf_map *map, *rodata = NULL;
	char name[128], *end;
	const char *eq, *val;
	unsigned long long v;
	const void *init;
	struct btf *btf;
	size_t size;
	int sec_id;

	eq = strchr(assign, '=');
	if (!eq || eq == assign || (size_t)(eq - assign) >= sizeof(name)) {
		fail("--set %s: expected VAR=VALUE", assign);
		return -1;
	}
	memcpy(name, assign, eq - assign);
	name[eq - assign] = '\0';
	val = eq + 1;
	errno = 0;
	v = strtoull(val, &end, 0);
	if (errno || !*val || *end || val[0] == '-') {
		fail("--set %s: value '%s' is not an unsigned integer", assign, val);
		return -1;
	}

	bpf_object__for_each_map(map, obj) {
		if (bpf_map__is_internal(map) && has_suffix(bpf_map__name(map), ".rodata")) {
			rodata = map;
			break;
		}
	}
	btf = bpf_object__btf(obj);
	sec_id = btf ? btf__find_by_name_kind(btf, ".rodata", BTF_KIND_DATASEC) : -ENOENT;
	if (!rodata || sec_id < 0) {
		fail("--set %s: the object has no .rodata variables (no `const volatile` globals)",
		     assign);
		return -1;
	}
	sec = btf__type_by_id(btf, sec_id);
	vsi = btf_var_secinfos(sec);
	for (int i = 0; i < btf_vlen(sec); i++, vsi++) {
		const struct btf_type *var = btf__type_by_id(btf, vsi->type);
		unsigned char buf[8];
		void *copy;

		if (strcmp(btf__name_by_offset(btf, var->name_off), name))
			continue;
		if (vsi->size != 1 && vsi->size != 2 && vsi->size != 4 && vsi->size != 8) {
			fail("--set %s: variable '%s' has size %u, only 1/2/4/8-byte integers are supported",
			     assign, name, vsi->size);
			return -1;
		}
		if (vsi->size < 8 && v >> (vsi->size * 8)) {
			fail("--set %s: value %llu does not fit variable '%s' (u%u)", assign, v, name,
			     vsi->size * 8);
			return -1;
		}
		init = bpf_map__initial_value(rodata, &size);
		if (!init || vsi->offset + vsi->size > size) {
			fail("--set %s: .rodata image too small for '%s'", assign, name);
			return -1;
		}
		copy = malloc(size);
		if (!copy) {
			fail("out of memory");
			return -1;
		}
		memcpy(copy, init, size);
		switch (vsi->size) {
		case 1: { __u8 x = v; memcpy(buf, &x, 1); break; }
		case 2: { __u16 x = v; memcpy(buf, &x, 2); break; }
		case 4: { __u32 x = v; memcpy(buf, &x, 4); break; }
		default: { __u64 x = v; memcpy(buf, &x, 8); break; }
		}
		memcpy((char *)copy + vsi->offset, buf, vsi->size);
		if (bpf_map__set_initial_value(rodata, copy, size)) {
			fail("--set %s: setting the .rodata image failed: %s", assign, strerror(errno));
			free(copy);
			return -1;
		}
		free(copy);
		return 0;
	}
	fail("--set %s: no variable '%s' in .rodata of the object", assign, name);
	list_rodata_vars(btf, sec);
	return -1;
}

/*
 * Open OBJ, set rodata, point every non-internal map at DIR/maps/<name>
 * (reused if already pinned, pinned otherwise) and load. Returns the object
 * or NULL; *progp gets the program named o->prog.
 */
static struct bpf_object *open_and_load(const struct opts *o, struct bpf_program **progp)
{
	for (int attempt = 1; ; attempt++) {
		struct bpf_program *prog;
		struct bpf_object *obj;
		struct bpf_map *map;
		int err;

		obj = bpf_object__open_file(o->obj, NULL);
		if (!obj) {
			fail("opening BPF object %s: %s%s", o->obj, strerror(errno),
			     errno == ENOENT ? " (run `make setup` or `make -C ebpf`)" : "");
			return NULL;
		}
		prog = bpf_object__find_program_by_name(obj, o->prog);
		if (!prog) {
			struct bpf_program *p;

			fail("no program '%s' in %s", o->prog, o->obj);
			fputs("tbload: programs in the object:", stderr);
			bpf_object__for_each_program(p, obj)
				fprintf(stderr, " %s", bpf_program__name(p));
			fputc('\n', stderr);
			goto err_close;
		}
		for (int i = 0; i < o->nsets; i++)
			if (set_rodata_var(obj, o->sets[i]))
				goto err_close;
		bpf_object__for_each_map(map, obj) {
			char path[PATH_MAX];

			if (bpf_map__is_internal(map))
				continue; /* .rodata/.data/.bss are per load, never shared */
			if (snprintf(path, sizeof(path), "%s/maps/%s", o->pin_dir,
				     bpf_map__name(map)) >= (int)sizeof(path)) {
				fail("pin path for map %s too long", bpf_map__name(map));
				goto err_close;
			}
			err = bpf_map__set_pin_path(map, path);
			if (err) {
				fail("setting pin path %s for map %s: %s", path, bpf_map__name(map),
				     strerror(-err));
				goto err_close;
			}
		}
		err = bpf_object__load(obj);
		if (!err) {
			*progp = prog;
			return obj;
		}
		bpf_object__close(obj);
		/* Another loader pinned the same map between our check and our pin. */
		if (err == -EEXIST && attempt < LOAD_ATTEMPTS)
			continue;
		fail("loading %s into the kernel (maps pinned under %s/maps): %s "
		     "(the libbpf messages above name the map or the verifier error; -v for the full log)",
		     o->obj, o->pin_dir, strerror(-err));
		return NULL;
err_close:
		bpf_object__close(obj);
		return NULL;
	}
}

static int cmd_attach(const struct opts *o)
{
	DECLARE_LIBBPF_OPTS(bpf_tc_hook, hook);
	DECLARE_LIBBPF_OPTS(bpf_tc_opts, tco);
	enum bpf_tc_attach_point ap;
	struct bpf_program *prog;
	struct bpf_object *obj;
	char pin[PATH_MAX];
	unsigned int ifindex;
	struct stat st;
	int err;

	if (need(o->obj, "--obj", "attach") || need(o->prog, "--prog", "attach") ||
	    need(o->dev, "--dev", "attach") || need(o->dir, "--dir", "attach") ||
	    need(o->pin_dir, "--pin-dir", "attach"))
		return 2;
	if (parse_dir(o->dir, &ap) || check_dev_name(o->dev))
		return 2;
	if (prepare_pin_dir(o->pin_dir))
		return 1;
	if (snprintf(pin, sizeof(pin), "%s/progs/%s-%s", o->pin_dir, o->dev, o->dir) >=
	    (int)sizeof(pin)) {
		fail("program pin path too long");
		return 1;
	}
	if (stat(pin, &st) == 0) {
		fail("program pin %s already exists: %s %s already has a program of this run "
		     "(detach it first, or use another --pin-dir)", pin, o->dev, o->dir);
		return 1;
	}
	if (o->netns && enter_netns(o->netns))
		return 1;
	ifindex = if_nametoindex(o->dev);
	if (!ifindex) {
		fail("device %s not found in network namespace %s: %s", o->dev,
		     o->netns ? o->netns : "(current)", strerror(errno));
		return 1;
	}

	obj = open_and_load(o, &prog);
	if (!obj)
		return 1;

	hook.ifindex = ifindex;
	hook.attach_point = ap;
	err = bpf_tc_hook_create(&hook);
	if (err && err != -EEXIST) {
		fail("creating the clsact qdisc on %s: %s", o->dev, strerror(-err));
		goto out;
	}
	tco.prog_fd = bpf_program__fd(prog);
	err = bpf_tc_attach(&hook, &tco);
	if (err) {
		fail("attaching program %s to %s %s (tc, direct-action): %s", o->prog, o->dev,
		     o->dir, strerror(-err));
		goto out;
	}
	err = bpf_program__pin(prog, pin);
	if (err) {
		DECLARE_LIBBPF_OPTS(bpf_tc_opts, del, .handle = tco.handle,
				    .priority = tco.priority);

		fail("pinning program at %s: %s (detaching it again)", pin, strerror(-err));
		bpf_tc_detach(&hook, &del);
		goto out;
	}
	printf("{\"prog_id\": %u, \"handle\": %u, \"priority\": %u, \"ifindex\": %u, "
	       "\"prog_pin\": \"%s\"}\n",
	       tco.prog_id, tco.handle, tco.priority, ifindex, pin);
	err = 0;
out:
	bpf_object__close(obj);
	return err ? 1 : 0;
}

static int cmd_detach(const struct opts *o)
{
	DECLARE_LIBBPF_OPTS(bpf_tc_hook, hook);
	DECLARE_LIBBPF_OPTS(bpf_tc_opts, tco);
	enum bpf_tc_attach_point ap;
	unsigned int ifindex;
	int err;

	if (need(o->dev, "--dev", "detach") || need(o->dir, "--dir", "detach"))
		return 2;
	if (o->handle < 0 || o->priority < 0) {
		fail("detach needs --handle and --priority (as printed by attach)");
		return 2;
	}
	if (parse_dir(o->dir, &ap) || check_dev_name(o->dev))
		return 2;
	if (o->netns && enter_netns(o->netns))
		return 1;
	ifindex = if_nametoindex(o->dev);
	if (!ifindex) {
		fail("device %s not found in network namespace %s: %s", o->dev,
		     o->netns ? o->netns : "(current)", strerror(errno));
		return 1;
	}
	hook.ifindex = ifindex;
	hook.attach_point = ap;
	tco.handle = o->handle;
	tco.priority = o->priority;
	err = bpf_tc_detach(&hook, &tco);
	if (err) {
		fail("detaching handle %lld priority %lld from %s %s: %s", o->handle, o->priority,
		     o->dev, o->dir, strerror(-err));
		return 1;
	}
	if (o->pin_dir) {
		char pin[PATH_MAX];

		snprintf(pin, sizeof(pin), "%s/progs/%s-%s", o->pin_dir, o->dev, o->dir);
		if (unlink(pin) && errno != ENOENT) {
			fail("removing program pin %s: %s", pin, strerror(errno));
			return 1;
		}
	}
	printf("{\"detached\": true, \"ifindex\": %u}\n", ifindex);
	return 0;
}

static __u16 ip_checksum(const unsigned char *p, size_t len)
{
	__u32 sum = 0;

	for (size_t i = 0; i + 1 < len; i += 2)
		sum += (p[i] << 8) | p[i + 1];
	if (len & 1)
		sum += p[len - 1] << 8;
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return ~sum & 0xffff;
}

#define SYNTH_MIN (14 + 20 + 8)
#define SYNTH_MAX 65535

/* Ethernet + IPv4 + UDP frame of exactly len bytes (10.0.0.1:5001 -> 10.0.0.2:5002). */
static unsigned char *synth_frame(size_t len)
{
	unsigned char *f = calloc(1, len);
	unsigned char *ip, *udp;
	__u16 csum;

	if (!f)
		return NULL;
	memcpy(f, "\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00", 14);
	ip = f + 14;
	ip[0] = 0x45;
	ip[2] = (len - 14) >> 8;
	ip[3] = (len - 14) & 0xff;
	ip[6] = 0x40; /* DF */
	ip[8] = 64;   /* TTL */
	ip[9] = 17;   /* UDP */
	memcpy(ip + 12, "\x0a\x00\x00\x01\x0a\x00\x00\x02", 8);
	csum = ip_checksum(ip, 20);
	ip[10] = csum >> 8;
	ip[11] = csum & 0xff;
	udp = ip + 20;
	udp[0] = 5001 >> 8;
	udp[1] = 5001 & 0xff;
	udp[2] = 5002 >> 8;
	udp[3] = 5002 & 0xff;
	udp[4] = (len - 34) >> 8;
	udp[5] = (len - 34) & 0xff;
	for (size_t i = SYNTH_MIN; i < len; i++)
		f[i] = (unsigned char)i;
	return f;
}

static unsigned char *read_packet(const char *arg, size_t *lenp)
{
	char *end;
	unsigned long long n;

	if (*arg && strspn(arg, "0123456789") == strlen(arg)) {
		errno = 0;
		n = strtoull(arg, &end, 10);
		if (errno || n < SYNTH_MIN || n > SYNTH_MAX) {
			fail("--packet %s: a synthesised Ethernet+IPv4+UDP frame needs %d..%d bytes",
			     arg, SYNTH_MIN, SYNTH_MAX);
			return NULL;
		}
		*lenp = n;
		return synth_frame(n);
	}

	FILE *f = fopen(arg, "rb");
	unsigned char *buf;
	long size;

	if (!f) {
		fail("--packet %s: neither a length nor a readable file: %s", arg, strerror(errno));
		return NULL;
	}
	if (fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fail("--packet %s: cannot determine the file size", arg);
		fclose(f);
		return NULL;
	}
	if (size < 14 || size > SYNTH_MAX) {
		fail("--packet %s: %ld bytes; a frame needs 14..%d bytes", arg, size, SYNTH_MAX);
		fclose(f);
		return NULL;
	}
	buf = malloc(size);
	if (!buf || fread(buf, 1, size, f) != (size_t)size) {
		fail("--packet %s: reading failed", arg);
		free(buf);
		fclose(f);
		return NULL;
	}
	fclose(f);
	*lenp = size;
	return buf;
}

static int cmd_test_run(const struct opts *o)
{
	DECLARE_LIBBPF_OPTS(bpf_test_run_opts, tr);
	struct bpf_program *prog;
	struct bpf_object *obj;
	unsigned char *pkt;
	size_t len;
	int err;

	if (need(o->obj, "--obj", "test-run") || need(o->prog, "--prog", "test-run") ||
	    need(o->pin_dir, "--pin-dir", "test-run") || need(o->packet, "--packet", "test-run"))
		return 2;
	pkt = read_packet(o->packet, &len);
	if (!pkt)
		return 2;
	if (prepare_pin_dir(o->pin_dir)) {
		free(pkt);
		return 1;
	}
	obj = open_and_load(o, &prog);
	if (!obj) {
		free(pkt);
		return 1;
	}
	tr.data_in = pkt;
	tr.data_size_in = len;
	tr.repeat = o->repeat;
	err = bpf_prog_test_run_opts(bpf_program__fd(prog), &tr);
	if (err) {
		fail("BPF_PROG_TEST_RUN of %s with a %zu-byte packet: %s%s", o->prog, len,
		     strerror(-err),
		     err == -EINVAL ? " (the kernel takes test-run packets of 14 bytes up to"
				      " about one page minus skb overhead, ~3.7 KiB)" : "");
	} else {
		printf("{\"retval\": %u, \"duration_ns\": %u, \"packet_len\": %zu, \"repeat\": %ld}\n",
		       tr.retval, tr.duration, len, o->repeat);
	}
	bpf_object__close(obj);
	free(pkt);
	return err ? 1 : 0;
}

static const char *dir_name(__u8 dir)
{
	switch (dir) {
	case PORTSTAT_DIR_INGRESS: return "ingress";
	case PORTSTAT_DIR_EGRESS: return "egress";
	default: return "unknown";
	}
}

static int cmd_dump_portstat(const struct opts *o)
{
	struct bpf_map_info info;
	__u32 info_len = sizeof(info);
	struct portstat_key key, next;
	struct portstat_value val;
	char link[64], target[64];
	bool first = true;
	int fd, err;
	ssize_t n;

	if (need(o->map, "--map", "dump-portstat"))
		return 2;
	fd = bpf_obj_get(o->map);
	if (fd < 0) {
		fail("opening pinned map %s: %s", o->map, strerror(errno));
		return 1;
	}
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	target[n > 0 ? n : 0] = '\0';
	if (strcmp(target, "anon_inode:bpf-map")) {
		fail("%s is not a pinned map (%s)", o->map, n > 0 ? target : "unknown object");
		close(fd);
		return 1;
	}
	memset(&info, 0, sizeof(info));
	err = bpf_obj_get_info_by_fd(fd, &info, &info_len);
	if (err) {
		fail("reading map info of %s: %s", o->map, strerror(errno));
		close(fd);
		return 1;
	}
	if (info.type != BPF_MAP_TYPE_HASH || info.key_size != sizeof(key) ||
	    info.value_size != sizeof(val)) {
		fail("%s is not a portstat counters map (type %u, key %u bytes, value %u bytes; "
		     "expected hash, %zu, %zu)", o->map, info.type, info.key_size,
		     info.value_size, sizeof(key), sizeof(val));
		close(fd);
		return 1;
	}
	for (;;) {
		err = bpf_map_get_next_key(fd, first ? NULL : &key, &next);
		if (err) {
			if (errno == ENOENT)
				break;
			fail("iterating map %s: %s", o->map, strerror(errno));
			close(fd);
			return 1;
		}
		first = false;
		key = next;
		if (bpf_map_lookup_elem(fd, &key, &val)) {
			if (errno == ENOENT)
				continue; /* deleted while iterating */
			fail("looking up an entry of %s: %s", o->map, strerror(errno));
			close(fd);
			return 1;
		}
		printf("{\"node\": %u, \"port\": %u, \"dir\": %u, \"direction\": \"%s\", "
		       "\"packets\": %llu, \"bytes\": %llu, \"first_ns\": %llu, \"last_ns\": %llu}\n",
		       key.node, key.port, key.dir, dir_name(key.dir),
		       (unsigned long long)val.packets, (unsigned long long)val.bytes,
		       (unsigned long long)val.first_ns, (unsigned long long)val.last_ns);
	}
	close(fd);
	return 0;
}

/* ---- optswitch support: load / attach-node / map-update / map-dump / test-trace ---- */

static int cmd_load(const struct opts *o)
{
	struct bpf_program *prog;
	struct bpf_object *obj;

	if (need(o->obj, "--obj", "load") || need(o->prog, "--prog", "load") ||
	    need(o->pin_dir, "--pin-dir", "load"))
		return 2;
	if (prepare_pin_dir(o->pin_dir))
		return 1;
	obj = open_and_load(o, &prog);
	if (!obj)
		return 1;
	printf("{\"loaded\": true, \"pin_dir\": \"%s\"}\n", o->pin_dir);
	bpf_object__close(obj);
	return 0;
}

/* Attach one loaded program to tc dir of ifindex and pin it at DIR/progs/<dev>-<dir>. */
static int attach_one(const struct opts *o, struct bpf_program *prog, const char *dev,
		      unsigned int ifindex, enum bpf_tc_attach_point ap, const char *dir)
{
	DECLARE_LIBBPF_OPTS(bpf_tc_hook, hook);
	DECLARE_LIBBPF_OPTS(bpf_tc_opts, tco);
	char pin[PATH_MAX];
	int err;

	if (snprintf(pin, sizeof(pin), "%s/progs/%s-%s", o->pin_dir, dev, dir) >= (int)sizeof(pin)) {
		fail("program pin path too long");
		return -1;
	}
	hook.ifindex = ifindex;
	hook.attach_point = ap;
	err = bpf_tc_hook_create(&hook);
	if (err && err != -EEXIST) {
		fail("creating the clsact qdisc on %s: %s", dev, strerror(-err));
		return -1;
	}
	tco.prog_fd = bpf_program__fd(prog);
	err = bpf_tc_attach(&hook, &tco);
	if (err) {
		fail("attaching program %s to %s %s (tc, direct-action): %s",
		     bpf_program__name(prog), dev, dir, strerror(-err));
		return -1;
	}
	err = bpf_program__pin(prog, pin);
	if (err) {
		DECLARE_LIBBPF_OPTS(bpf_tc_opts, del, .handle = tco.handle, .priority = tco.priority);

		fail("pinning program at %s: %s (detaching it again)", pin, strerror(-err));
		bpf_tc_detach(&hook, &del);
		return -1;
	}
	printf("{\"dev\": \"%s\", \"dir\": \"%s\", \"prog_id\": %u, \"handle\": %u, "
	       "\"priority\": %u, \"ifindex\": %u, \"prog_pin\": \"%s\"}\n",
	       dev, dir, tco.prog_id, tco.handle, tco.priority, ifindex, pin);
	return 0;
}

/* Load the object once (one node) and attach its ingress and egress programs to every
 * --dev; prints one JSON line per attachment. */
static int cmd_attach_node(const struct opts *o)
{
	unsigned int ifindex[MAX_DEVS];
	struct bpf_program *ing, *egr;
	struct bpf_object *obj;
	int err = 0;

	if (need(o->obj, "--obj", "attach-node") || need(o->prog, "--prog", "attach-node") ||
	    need(o->prog2, "--prog2", "attach-node") || need(o->pin_dir, "--pin-dir", "attach-node"))
		return 2;
	if (o->ndevs == 0) {
		fail("attach-node needs at least one --dev");
		return 2;
	}
	for (int i = 0; i < o->ndevs; i++)
		if (check_dev_name(o->devs[i]))
			return 2;
	if (prepare_pin_dir(o->pin_dir))
		return 1;
	if (o->netns && enter_netns(o->netns))
		return 1;
	for (int i = 0; i < o->ndevs; i++) {
		ifindex[i] = if_nametoindex(o->devs[i]);
		if (!ifindex[i]) {
			fail("device %s not found in network namespace %s: %s", o->devs[i],
			     o->netns ? o->netns : "(current)", strerror(errno));
			return 1;
		}
	}
	obj = open_and_load(o, &ing);
	if (!obj)
		return 1;
	egr = bpf_object__find_program_by_name(obj, o->prog2);
	if (!egr) {
		fail("no program '%s' in %s", o->prog2, o->obj);
		bpf_object__close(obj);
		return 1;
	}
	for (int i = 0; i < o->ndevs && !err; i++) {
		err = attach_one(o, ing, o->devs[i], ifindex[i], BPF_TC_INGRESS, "ingress");
		if (!err)
			err = attach_one(o, egr, o->devs[i], ifindex[i], BPF_TC_EGRESS, "egress");
	}
	bpf_object__close(obj);
	return err ? 1 : 0;
}

static int open_pinned_map(const char *path, struct bpf_map_info *info)
{
	__u32 info_len = sizeof(*info);
	int fd = bpf_obj_get(path);

	if (fd < 0) {
		fail("opening pinned map %s: %s", path, strerror(errno));
		return -1;
	}
	memset(info, 0, sizeof(*info));
	if (bpf_obj_get_info_by_fd(fd, info, &info_len)) {
		fail("%s is not a pinned map (reading map info: %s)", path, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

static int parse_hex(const char *s, unsigned char *out, size_t n)
{
	if (strlen(s) != 2 * n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned int b;

		if (sscanf(s + 2 * i, "%2x", &b) != 1)
			return -1;
		out[i] = b;
	}
	return 0;
}

static void print_hex(const unsigned char *p, size_t n)
{
	static const char digits[] = "0123456789abcdef";

	/* One putchar pair per byte: a map value is several KB, dumped under TCG too. */
	for (size_t i = 0; i < n; i++) {
		putchar(digits[p[i] >> 4]);
		putchar(digits[p[i] & 0xf]);
	}
}

static int cmd_map_update(const struct opts *o)
{
	struct bpf_map_info info;
	unsigned char *key = NULL, *val = NULL;
	char *line = NULL, *k, *v, *save;
	size_t cap = 0;
	long lineno = 0, count = 0;
	int fd, rc = 1;
	FILE *f;

	if (need(o->map, "--map", "map-update") || need(o->file, "--file", "map-update"))
		return 2;
	fd = open_pinned_map(o->map, &info);
	if (fd < 0)
		return 1;
	f = fopen(o->file, "r");
	if (!f) {
		fail("--file %s: %s", o->file, strerror(errno));
		close(fd);
		return 1;
	}
	key = malloc(info.key_size);
	val = malloc(info.value_size);
	if (!key || !val) {
		fail("out of memory");
		goto out;
	}
	while (getline(&line, &cap, f) > 0) {
		lineno++;
		k = strtok_r(line, " \t\n", &save);
		if (!k)
			continue;
		v = strtok_r(NULL, " \t\n", &save);
		if (!v || parse_hex(k, key, info.key_size) || parse_hex(v, val, info.value_size)) {
			fail("%s line %ld: expected KEYHEX (%u bytes) VALUEHEX (%u bytes) for map %s",
			     o->file, lineno, info.key_size, info.value_size, o->map);
			goto out;
		}
		if (bpf_map_update_elem(fd, key, val, BPF_ANY)) {
			fail("%s line %ld: updating map %s: %s", o->file, lineno, o->map, strerror(errno));
			goto out;
		}
		count++;
	}
	printf("{\"updated\": %ld}\n", count);
	rc = 0;
out:
	free(line);
	free(key);
	free(val);
	fclose(f);
	close(fd);
	return rc;
}

static int dump_entry(int fd, const char *map, const unsigned char *key, unsigned char *val,
		      const struct bpf_map_info *info)
{
	if (bpf_map_lookup_elem(fd, key, val)) {
		if (errno == ENOENT)
			return 0;
		fail("looking up an entry of %s: %s", map, strerror(errno));
		return -1;
	}
	print_hex(key, info->key_size);
	putchar(' ');
	print_hex(val, info->value_size);
	putchar('\n');
	return 0;
}

/* Dump the keys listed in o->file (one KEYHEX per line); absent keys print nothing. */
static int dump_listed(int fd, const struct opts *o, unsigned char *key, unsigned char *val,
		       const struct bpf_map_info *info)
{
	char *line = NULL, *k, *save;
	size_t cap = 0;
	long lineno = 0;
	int rc = -1;
	FILE *f = fopen(o->file, "r");

	if (!f) {
		fail("--file %s: %s", o->file, strerror(errno));
		return -1;
	}
	while (getline(&line, &cap, f) > 0) {
		lineno++;
		k = strtok_r(line, " \t\n", &save);
		if (!k)
			continue;
		if (parse_hex(k, key, info->key_size)) {
			fail("%s line %ld: expected KEYHEX (%u bytes) for map %s",
			     o->file, lineno, info->key_size, o->map);
			goto out;
		}
		if (dump_entry(fd, o->map, key, val, info))
			goto out;
	}
	rc = 0;
out:
	free(line);
	fclose(f);
	return rc;
}

static int cmd_map_dump(const struct opts *o)
{
	struct bpf_map_info info;
	unsigned char *key, *next, *val;
	bool first = true;
	int fd, rc = 1;

	if (need(o->map, "--map", "map-dump"))
		return 2;
	fd = open_pinned_map(o->map, &info);
	if (fd < 0)
		return 1;
	key = malloc(info.key_size);
	next = malloc(info.key_size);
	val = malloc(info.value_size);
	if (!key || !next || !val) {
		fail("out of memory");
		goto out;
	}
	if (o->file) {
		rc = dump_listed(fd, o, key, val, &info) ? 1 : 0;
		goto out;
	}
	for (;;) {
		if (bpf_map_get_next_key(fd, first ? NULL : key, next)) {
			if (errno == ENOENT)
				break;
			fail("iterating map %s: %s", o->map, strerror(errno));
			goto out;
		}
		first = false;
		memcpy(key, next, info.key_size);
		if (dump_entry(fd, o->map, key, val, &info))
			goto out;
	}
	rc = 0;
out:
	free(key);
	free(next);
	free(val);
	close(fd);
	return rc;
}

#define TRACE_FRAME_MAX 1514

/*
 * Run a trace through the programs of one load: every line
 *   PROG NOW_NS LEN PORT RAND DST_IPV4
 * sets the optsw_hook map (time, model length, port, random number), runs PROG on an
 * Ethernet+IPv4+UDP frame to DST_IPV4 of min(LEN, 1514) bytes and prints
 *   {"retval": R, "cb0": C, "tstamp": T}
 * (T = skb->tstamp after the run). Needs rodata tb_test_mode=1.
 */
static int cmd_test_trace(const struct opts *o)
{
	DECLARE_LIBBPF_OPTS(bpf_test_run_opts, tr);
	struct __sk_buff ctx_in, ctx_out;
	struct bpf_program *prog, *first;
	struct bpf_object *obj;
	char *line = NULL, pname[64], dst[64];
	unsigned long long now;
	unsigned int len, port, rnd;
	size_t cap = 0;
	long lineno = 0;
	int hook_fd, rc = 1;
	FILE *f;

	if (need(o->obj, "--obj", "test-trace") || need(o->prog, "--prog", "test-trace") ||
	    need(o->pin_dir, "--pin-dir", "test-trace") || need(o->file, "--trace", "test-trace"))
		return 2;
	if (prepare_pin_dir(o->pin_dir))
		return 1;
	f = fopen(o->file, "r");
	if (!f) {
		fail("--trace %s: %s", o->file, strerror(errno));
		return 1;
	}
	obj = open_and_load(o, &first);
	if (!obj) {
		fclose(f);
		return 1;
	}
	hook_fd = bpf_object__find_map_fd_by_name(obj, "optsw_hook");
	if (hook_fd < 0) {
		fail("%s has no optsw_hook map", o->obj);
		goto out;
	}
	while (getline(&line, &cap, f) > 0) {
		struct optsw_hook h = { 0 };
		unsigned char *frame;
		struct in_addr ip;
		__u32 zero = 0;
		size_t flen;
		int err;

		lineno++;
		if (line[0] == '\n' || line[0] == '#')
			continue;
		if (sscanf(line, "%63s %llu %u %u %u %63s", pname, &now, &len, &port, &rnd, dst) != 6 ||
		    inet_pton(AF_INET, dst, &ip) != 1 || len < SYNTH_MIN) {
			fail("%s line %ld: expected PROG NOW_NS LEN(>=%d) PORT RAND DST_IPV4", o->file,
			     lineno, SYNTH_MIN);
			goto out;
		}
		prog = bpf_object__find_program_by_name(obj, pname);
		if (!prog) {
			fail("%s line %ld: no program '%s' in %s", o->file, lineno, pname, o->obj);
			goto out;
		}
		h.now_ns = now;
		h.len = len;
		h.port = port;
		h.rand = rnd;
		if (bpf_map_update_elem(hook_fd, &zero, &h, BPF_ANY)) {
			fail("setting optsw_hook: %s", strerror(errno));
			goto out;
		}
		flen = len < TRACE_FRAME_MAX ? len : TRACE_FRAME_MAX;
		frame = synth_frame(flen);
		if (!frame) {
			fail("out of memory");
			goto out;
		}
		memcpy(frame + 14 + 16, &ip, 4);
		/* The kernel writes sizes back into the options: start afresh every run. */
		memset(&tr, 0, sizeof(tr));
		tr.sz = sizeof(tr);
		memset(&ctx_in, 0, sizeof(ctx_in));
		memset(&ctx_out, 0, sizeof(ctx_out));
		tr.data_in = frame;
		tr.data_size_in = flen;
		tr.ctx_in = &ctx_in;
		tr.ctx_size_in = sizeof(ctx_in);
		tr.ctx_out = &ctx_out;
		tr.ctx_size_out = sizeof(ctx_out);
		tr.repeat = 1;
		err = bpf_prog_test_run_opts(bpf_program__fd(prog), &tr);
		free(frame);
		if (err) {
			fail("%s line %ld: BPF_PROG_TEST_RUN of %s: %s", o->file, lineno, pname,
			     strerror(-err));
			goto out;
		}
		printf("{\"retval\": %u, \"cb0\": %u, \"tstamp\": %llu}\n", tr.retval, ctx_out.cb[0],
		       (unsigned long long)ctx_out.tstamp);
	}
	rc = 0;
out:
	free(line);
	fclose(f);
	bpf_object__close(obj);
	return rc;
}

int main(int argc, char **argv)
{
	struct opts o;
	const char *cmd;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	cmd = argv[1];
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		usage(stdout);
		return 0;
	}
	if (parse_opts(argc - 1, argv + 1, &o))
		return 2;
	libbpf_set_print(libbpf_print);
	/* Line-buffer stdout so the JSON line is out before any later stderr. */
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (!strcmp(cmd, "attach"))
		return cmd_attach(&o);
	if (!strcmp(cmd, "detach"))
		return cmd_detach(&o);
	if (!strcmp(cmd, "test-run"))
		return cmd_test_run(&o);
	if (!strcmp(cmd, "dump-portstat"))
		return cmd_dump_portstat(&o);
	if (!strcmp(cmd, "load"))
		return cmd_load(&o);
	if (!strcmp(cmd, "attach-node"))
		return cmd_attach_node(&o);
	if (!strcmp(cmd, "map-update"))
		return cmd_map_update(&o);
	if (!strcmp(cmd, "map-dump"))
		return cmd_map_dump(&o);
	if (!strcmp(cmd, "test-trace"))
		return cmd_test_trace(&o);
	fail("unknown command '%s'", cmd);
	usage(stderr);
	return 2;
}
