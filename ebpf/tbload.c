// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * tbload: the generic libbpf loader of optical-tcp-testbed.
 *
 * It knows no program: every struct layout lives with the program's Python
 * layout module; keys, values, packets and contexts cross as hex bytes.
 *
 *   tbload [-v] OP FIELD...     run one operation (fields as arguments)
 *   tbload [-v] batch           run operations read from stdin, one per line,
 *                               fields separated by one TAB; empty lines and
 *                               lines starting with '#' are skipped
 *
 * Operations (PROG is a pinned program's path, or @NAME: the program NAME of
 * the latest `load` of this invocation; NETNS is a name in /run/netns, a path,
 * or - for the namespace tbload started in):
 *
 *   load OBJ PIN_DIR PROG_DIR|- [VAR=VALUE ...]
 *        open OBJ, set `const volatile` .rodata variables (sized by BTF), pin
 *        every map at PIN_DIR/maps/<map> (an existing pin is reused, so the
 *        loads of one run share their maps), load; pin every program at
 *        PROG_DIR/<program> unless PROG_DIR is - (PROG_DIR must not exist).
 *        -> {"op": "load", "obj": OBJ, "prog_dir": PROG_DIR|null, "programs": [...]}
 *   maps OBJ PIN_DIR
 *        as load, but no program is loaded (nothing verified): only the maps are
 *        created, or reused, and pinned at PIN_DIR/maps/<map>, e.g. to fill them
 *        before a later load; the object is closed (@NAME still names the
 *        latest load's programs) -> {"op": "maps", "obj": OBJ, "maps": [...]}
 *   attach NETNS DEV ingress|egress PROG
 *        create the clsact qdisc on DEV (if missing), attach PROG
 *        (direct-action) -> {"op": "attach", "dev", "dir", "prog", "prog_id",
 *        "handle", "priority", "ifindex", "prog_pin"}
 *   detach NETNS DEV ingress|egress HANDLE PRIORITY
 *        -> {"op": "detach", "dev", "dir", "ifindex"}
 *   update MAP KEYHEX VALUEHEX      (MAP: a pinned map's path) -> no output
 *   lookup MAP KEYHEX               -> "KEYHEX VALUEHEX", or "KEYHEX -" if absent
 *   dump MAP                        -> "KEYHEX VALUEHEX" per entry, then
 *                                      {"op": "dump", "entries": N}
 *   test-run PROG REPEAT DATA CTX   BPF_PROG_TEST_RUN; DATA and CTX are hex,
 *        - (none) or = (the previous test-run's) -> {"op": "test-run",
 *        "retval", "duration_ns", "data_len", "repeat", "ctx_out": HEX|null}
 *
 * A batch is parsed completely before anything runs: a malformed line (field
 * count, hex, direction, number, VAR=VALUE) exits 2 with nothing done.
 * Errors name the line, the operation and the failing step on stderr; exit
 * status 1 for a runtime failure (operations before it stay done), 2 for a
 * usage error.
 *
 * Network namespaces: only the network namespace is switched (setns
 * CLONE_NEWNET) and only for attach/detach, which return to the starting one.
 * `ip netns exec` is not used: it remounts /sys, which hides the host's bpffs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <linux/bpf.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#ifndef BPF_FS_MAGIC
#define BPF_FS_MAGIC 0xcafe4a11
#endif

#define LOAD_ATTEMPTS 5
#define FD_CACHE 32

enum op_kind { OP_LOAD, OP_MAPS, OP_ATTACH, OP_DETACH, OP_UPDATE, OP_LOOKUP, OP_DUMP, OP_TEST_RUN };

static const struct op_spec {
	const char *name;
	int min_fields; /* including the operation's name */
	int max_fields; /* -1: unbounded */
	const char *usage;
} SPECS[] = {
	[OP_LOAD] = { "load", 4, -1, "load OBJ PIN_DIR PROG_DIR|- [VAR=VALUE ...]" },
	[OP_MAPS] = { "maps", 3, 3, "maps OBJ PIN_DIR" },
	[OP_ATTACH] = { "attach", 5, 5, "attach NETNS|- DEV ingress|egress PROG" },
	[OP_DETACH] = { "detach", 6, 6, "detach NETNS|- DEV ingress|egress HANDLE PRIORITY" },
	[OP_UPDATE] = { "update", 4, 4, "update MAP KEYHEX VALUEHEX" },
	[OP_LOOKUP] = { "lookup", 3, 3, "lookup MAP KEYHEX" },
	[OP_DUMP] = { "dump", 2, 2, "dump MAP" },
	[OP_TEST_RUN] = { "test-run", 5, 5, "test-run PROG REPEAT DATAHEX|-|= CTXHEX|-|=" },
};
#define N_OPS ((int)(sizeof(SPECS) / sizeof(SPECS[0])))

struct blob {
	unsigned char *p;
	size_t n;
	bool owned;
};

struct op {
	enum op_kind kind;
	long line;       /* 0: from the command line */
	char **f;        /* fields, f[0] is the operation */
	int nf;
	struct blob key, val, data, ctx;
	bool has_data, has_ctx;
	enum bpf_tc_attach_point ap;
	long repeat;
	unsigned int handle, priority;
};

/*
 * The latest load, kept open so @NAME can refer to its programs; the next load
 * closes it. Its maps are pinned and its programs pinned or attached by then (a
 * tc filter holds its program), or unreachable anyway: @NAME names only the
 * latest load. Keeping every object open until exit cost one descriptor per map
 * and program per load: a batch of 400 loads (an Abilene fabric's ports) ran out
 * of descriptors (EMFILE) at the guest's limit of 1024.
 */
struct loaded {
	struct bpf_object *obj;
	const char *prog_dir; /* NULL: programs not pinned */
};

static bool verbose;
static const struct op *cur; /* for error messages */
static int orig_netns = -1;
static struct loaded last_load;
/*
 * While bpf_tc_hook_create() runs, libbpf's messages are held in hook_msg instead of
 * printed: the kernel answers "Exclusivity flag on" when DEV has its clsact qdisc
 * already (EEXIST, the usual case). They are printed only if the create failed
 * otherwise.
 */
static bool creating_hook;
static char hook_msg[512];

static struct {
	char *path;
	int fd;
} fd_cache[FD_CACHE];
static int fd_next;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;

	fputs("tbload: error: ", stderr);
	if (cur && cur->line)
		fprintf(stderr, "line %ld (%s): ", cur->line, cur->f[0]);
	else if (cur)
		fprintf(stderr, "%s: ", cur->f[0]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level == LIBBPF_DEBUG && !verbose)
		return 0;
	if (creating_hook && !verbose) {
		size_t used = strlen(hook_msg);

		vsnprintf(hook_msg + used, sizeof(hook_msg) - used, fmt, ap);
		return 0;
	}
	return vfprintf(stderr, fmt, ap);
}

static void usage(FILE *f)
{
	fputs("usage: tbload [-v] OP FIELD...   |   tbload [-v] batch  (OP lines on stdin, TAB-separated)\n"
	      "operations:\n", f);
	for (int i = 0; i < N_OPS; i++)
		fprintf(f, "  %s\n", SPECS[i].usage);
	fputs("PROG: a pinned program's path or @NAME (program NAME of this invocation's latest load)\n"
	      "NETNS: a name in /run/netns, a path, or - (the starting namespace)\n"
	      "-v: libbpf debug output (the verifier log) on stderr\n", f);
}

/* ---- output ---------------------------------------------------------------------- */

static void json_str(const char *s)
{
	if (!s) {
		fputs("null", stdout);
		return;
	}
	putchar('"');
	for (; *s; s++) {
		unsigned char c = *s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
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

/* ---- parsing ---------------------------------------------------------------------- */

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int parse_hex(const char *s, struct blob *b, const char *what)
{
	size_t len = strlen(s);

	if (len == 0 || len % 2) {
		fail("%s: expected an even number of hex digits, got %zu characters", what, len);
		return -1;
	}
	b->n = len / 2;
	b->p = malloc(b->n);
	b->owned = true;
	if (!b->p) {
		fail("out of memory");
		return -1;
	}
	for (size_t i = 0; i < b->n; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

		if (hi < 0 || lo < 0) {
			fail("%s: '%c%c' at byte %zu is not hex", what, s[2 * i], s[2 * i + 1], i);
			return -1;
		}
		b->p[i] = hi << 4 | lo;
	}
	return 0;
}

static int parse_uint(const char *s, unsigned long long max, unsigned long long *out,
		      const char *what)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 0);
	if (errno || !*s || *end || s[0] == '-' || *out > max) {
		fail("%s '%s': expected an integer in 0..%llu", what, s, max);
		return -1;
	}
	return 0;
}

static int parse_dir(const char *dir, enum bpf_tc_attach_point *ap)
{
	if (!strcmp(dir, "ingress"))
		*ap = BPF_TC_INGRESS;
	else if (!strcmp(dir, "egress"))
		*ap = BPF_TC_EGRESS;
	else {
		fail("direction '%s': expected ingress or egress", dir);
		return -1;
	}
	return 0;
}

static int check_dev_name(const char *dev)
{
	if (!*dev || strlen(dev) >= IFNAMSIZ || strchr(dev, '/') || dev[0] == '.') {
		fail("device '%s': not a valid interface name (1-%d characters, no '/')", dev,
		     IFNAMSIZ - 1);
		return -1;
	}
	return 0;
}

static int check_prog_ref(const char *p)
{
	if ((p[0] == '@' && p[1]) || p[0] == '/')
		return 0;
	fail("program '%s': expected @NAME or the absolute path of a pinned program", p);
	return -1;
}

static int check_abs(const char *p, const char *what)
{
	if (p[0] == '/' && strlen(p) < PATH_MAX - 64)
		return 0;
	fail("%s '%s': expected an absolute path", what, p);
	return -1;
}

/* Data/ctx of test-run: hex, - (none) or = (the previous test-run's). */
static int parse_blob_ref(const char *s, struct blob *b, bool *has, const struct blob *prev,
			  bool prev_has, const char *what)
{
	if (!strcmp(s, "-")) {
		*has = false;
		return 0;
	}
	if (!strcmp(s, "=")) {
		if (!prev) {
			fail("%s '=': no earlier test-run to repeat", what);
			return -1;
		}
		*b = *prev;
		b->owned = false;
		*has = prev_has;
		return 0;
	}
	*has = true;
	return parse_hex(s, b, what);
}

/* Check one operation's fields; decode hex and numbers. prev: the previous test-run. */
static int parse_op(struct op *op, const struct op *prev_run)
{
	unsigned long long v;
	int k;

	for (k = 0; k < N_OPS; k++)
		if (!strcmp(op->f[0], SPECS[k].name))
			break;
	if (k == N_OPS) {
		fail("unknown operation '%s'", op->f[0]);
		return -1;
	}
	op->kind = k;
	if (op->nf < SPECS[k].min_fields || (SPECS[k].max_fields >= 0 && op->nf > SPECS[k].max_fields)) {
		fail("%d fields; expected: %s", op->nf - 1, SPECS[k].usage);
		return -1;
	}
	switch (op->kind) {
	case OP_LOAD:
		if (check_abs(op->f[2], "PIN_DIR") ||
		    (strcmp(op->f[3], "-") && check_abs(op->f[3], "PROG_DIR")))
			return -1;
		for (int i = 4; i < op->nf; i++) {
			const char *eq = strchr(op->f[i], '=');

			if (!eq || eq == op->f[i]) {
				fail("'%s': expected VAR=VALUE", op->f[i]);
				return -1;
			}
			if (parse_uint(eq + 1, ULLONG_MAX, &v, "value of rodata variable"))
				return -1;
		}
		return 0;
	case OP_MAPS:
		return check_abs(op->f[2], "PIN_DIR");
	case OP_ATTACH:
	case OP_DETACH:
		if (check_dev_name(op->f[2]) || parse_dir(op->f[3], &op->ap))
			return -1;
		if (op->kind == OP_ATTACH)
			return check_prog_ref(op->f[4]);
		if (parse_uint(op->f[4], UINT32_MAX, &v, "HANDLE"))
			return -1;
		op->handle = v;
		if (parse_uint(op->f[5], UINT16_MAX, &v, "PRIORITY"))
			return -1;
		op->priority = v;
		return 0;
	case OP_UPDATE:
		if (parse_hex(op->f[3], &op->val, "VALUEHEX"))
			return -1;
		/* fall through */
	case OP_LOOKUP:
		if (check_abs(op->f[1], "MAP"))
			return -1;
		return parse_hex(op->f[2], &op->key, "KEYHEX");
	case OP_DUMP:
		return check_abs(op->f[1], "MAP");
	case OP_TEST_RUN:
		if (check_prog_ref(op->f[1]) || parse_uint(op->f[2], UINT32_MAX, &v, "REPEAT"))
			return -1;
		if (v < 1) {
			fail("REPEAT '%s': expected an integer >= 1", op->f[2]);
			return -1;
		}
		op->repeat = v;
		if (parse_blob_ref(op->f[3], &op->data, &op->has_data, prev_run ? &prev_run->data : NULL,
				   prev_run && prev_run->has_data, "DATA") ||
		    parse_blob_ref(op->f[4], &op->ctx, &op->has_ctx, prev_run ? &prev_run->ctx : NULL,
				   prev_run && prev_run->has_ctx, "CTX"))
			return -1;
		return 0;
	}
	return -1;
}

/* Split a line (without its newline) at TABs into op->f. */
static int split_line(char *line, struct op *op)
{
	int cap = 8;

	op->f = malloc(cap * sizeof(*op->f));
	if (!op->f)
		return -1;
	op->nf = 0;
	for (char *s = line;;) {
		char *tab = strchr(s, '\t');

		if (op->nf == cap) {
			char **g = realloc(op->f, 2 * cap * sizeof(*op->f));

			if (!g)
				return -1;
			op->f = g;
			cap *= 2;
		}
		op->f[op->nf++] = s;
		if (!tab)
			break;
		*tab = '\0';
		s = tab + 1;
	}
	return 0;
}

/* Read every operation from stdin and parse it. Returns the count, or -1. */
static int read_batch(struct op **opsp)
{
	struct op *ops = NULL;
	int n = 0, cap = 0, prev_run = -1; /* index of the latest test-run */
	char *line = NULL;
	size_t lcap = 0;
	ssize_t len;
	long lineno = 0;

	while ((len = getline(&line, &lcap, stdin)) >= 0) {
		lineno++;
		if (len && line[len - 1] == '\n')
			line[--len] = '\0';
		if (!len || line[0] == '#')
			continue;
		if (n == cap) {
			struct op *more = realloc(ops, (cap ? 2 * cap : 64) * sizeof(*ops));

			if (!more) {
				fail("out of memory");
				return -1;
			}
			ops = more;
			cap = cap ? 2 * cap : 64;
		}
		memset(&ops[n], 0, sizeof(ops[n]));
		ops[n].line = lineno;
		if (split_line(line, &ops[n])) {
			fail("out of memory");
			return -1;
		}
		line = NULL; /* the fields point into it: keep it */
		lcap = 0;
		cur = &ops[n];
		if (parse_op(&ops[n], prev_run >= 0 ? &ops[prev_run] : NULL))
			return -1;
		if (ops[n].kind == OP_TEST_RUN)
			prev_run = n;
		n++;
	}
	free(line);
	cur = NULL;
	*opsp = ops;
	return n;
}

/* ---- pins, namespaces, descriptors ----------------------------------------------- */

/* mkdir -p */
static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(buf)) {
		fail("path '%s' is empty or too long", path);
		return -1;
	}
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1;; p++) {
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

/* DIR must end up on a bpffs; checks the deepest existing ancestor first, so that a
 * missing bpffs is reported as such rather than as a failing mkdir. */
static int prepare_bpffs_dir(const char *dir)
{
	char probe[PATH_MAX];
	struct statfs st;

	snprintf(probe, sizeof(probe), "%s", dir);
	while (statfs(probe, &st)) {
		char *slash = strrchr(probe, '/');

		if (errno != ENOENT || !slash) {
			fail("statfs %s: %s", probe, strerror(errno));
			return -1;
		}
		if (slash == probe)
			slash[1] = '\0';
		else
			*slash = '\0';
	}
	if ((unsigned long)st.f_type != BPF_FS_MAGIC) {
		fail("%s is not on a bpf filesystem (mount -t bpf bpf /sys/fs/bpf; "
		     "under `ip netns exec` /sys is remounted and bpffs is hidden)", dir);
		return -1;
	}
	return mkdir_p(dir);
}

static int enter_netns(const char *netns)
{
	char path[PATH_MAX];
	int fd;

	if (!strcmp(netns, "-"))
		return 0;
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

static int leave_netns(const char *netns)
{
	if (!strcmp(netns, "-"))
		return 0;
	if (setns(orig_netns, CLONE_NEWNET)) {
		fail("returning to the starting network namespace: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* A descriptor of the pinned object at path (cached; closed at exit). */
static int pinned_fd(const char *path, const char *what)
{
	int fd;

	for (int i = 0; i < FD_CACHE; i++)
		if (fd_cache[i].path && !strcmp(fd_cache[i].path, path))
			return fd_cache[i].fd;
	fd = bpf_obj_get(path);
	if (fd < 0) {
		fail("opening pinned %s %s: %s", what, path, strerror(errno));
		return -1;
	}
	if (fd_cache[fd_next].path) {
		close(fd_cache[fd_next].fd);
		free(fd_cache[fd_next].path);
	}
	fd_cache[fd_next].path = strdup(path);
	fd_cache[fd_next].fd = fd;
	fd_next = (fd_next + 1) % FD_CACHE;
	return fd;
}

static int map_fd(const char *path, struct bpf_map_info *info)
{
	__u32 len = sizeof(*info);
	int fd = pinned_fd(path, "map");

	if (fd < 0)
		return -1;
	memset(info, 0, sizeof(*info));
	if (bpf_obj_get_info_by_fd(fd, info, &len)) {
		fail("%s is not a pinned map (reading map info: %s)", path, strerror(errno));
		return -1;
	}
	if (info->type == BPF_MAP_TYPE_PERCPU_ARRAY || info->type == BPF_MAP_TYPE_PERCPU_HASH ||
	    info->type == BPF_MAP_TYPE_LRU_PERCPU_HASH) {
		fail("%s is a per-CPU map: not supported", path);
		return -1;
	}
	return fd;
}

/* The fd and name of PROG: @NAME of the latest load, or a pinned program. */
static int prog_fd(const char *ref, const char **pin)
{
	static char pin_buf[PATH_MAX];
	struct bpf_program *p;

	*pin = NULL;
	if (ref[0] != '@') {
		*pin = ref;
		return pinned_fd(ref, "program");
	}
	if (!last_load.obj) {
		fail("program %s: no earlier load in this invocation", ref);
		return -1;
	}
	p = bpf_object__find_program_by_name(last_load.obj, ref + 1);
	if (!p) {
		fail("no program '%s' in the latest load; programs:", ref + 1);
		bpf_object__for_each_program(p, last_load.obj)
			fprintf(stderr, " %s", bpf_program__name(p));
		fputc('\n', stderr);
		return -1;
	}
	if (last_load.prog_dir) {
		snprintf(pin_buf, sizeof(pin_buf), "%s/%s", last_load.prog_dir, ref + 1);
		*pin = pin_buf;
	}
	return bpf_program__fd(p);
}

/* ---- load -------------------------------------------------------------------------- */

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

		fprintf(stderr, " %s(u%u)", btf__name_by_offset(btf, var->name_off), vsi->size * 8);
	}
	fputc('\n', stderr);
}

/* Set a `const volatile` integer in .rodata, sized by its BTF (little-endian host). */
static int set_rodata_var(struct bpf_object *obj, const char *assign)
{
	const struct btf_var_secinfo *vsi;
	const struct btf_type *sec;
	struct bpf_map *map, *rodata = NULL;
	const char *eq = strchr(assign, '=');
	unsigned long long v = strtoull(eq + 1, NULL, 0); /* checked by parse_op */
	char name[128];
	struct btf *btf;
	size_t size;
	int sec_id;

	if ((size_t)(eq - assign) >= sizeof(name)) {
		fail("'%s': variable name too long", assign);
		return -1;
	}
	memcpy(name, assign, eq - assign);
	name[eq - assign] = '\0';
	bpf_object__for_each_map(map, obj) {
		if (bpf_map__is_internal(map) && has_suffix(bpf_map__name(map), ".rodata")) {
			rodata = map;
			break;
		}
	}
	btf = bpf_object__btf(obj);
	sec_id = btf ? btf__find_by_name_kind(btf, ".rodata", BTF_KIND_DATASEC) : -ENOENT;
	if (!rodata || sec_id < 0) {
		fail("'%s': the object has no .rodata variables (no `const volatile` globals)", assign);
		return -1;
	}
	sec = btf__type_by_id(btf, sec_id);
	vsi = btf_var_secinfos(sec);
	for (int i = 0; i < btf_vlen(sec); i++, vsi++) {
		const struct btf_type *var = btf__type_by_id(btf, vsi->type);
		const void *init;
		void *copy;

		if (strcmp(btf__name_by_offset(btf, var->name_off), name))
			continue;
		if (vsi->size != 1 && vsi->size != 2 && vsi->size != 4 && vsi->size != 8) {
			fail("'%s': variable '%s' has size %u, only 1/2/4/8-byte integers are supported",
			     assign, name, vsi->size);
			return -1;
		}
		if (vsi->size < 8 && v >> (vsi->size * 8)) {
			fail("'%s': value %llu does not fit variable '%s' (u%u)", assign, v, name,
			     vsi->size * 8);
			return -1;
		}
		init = bpf_map__initial_value(rodata, &size);
		if (!init || vsi->offset + vsi->size > size) {
			fail("'%s': .rodata image too small for '%s'", assign, name);
			return -1;
		}
		copy = malloc(size);
		if (!copy) {
			fail("out of memory");
			return -1;
		}
		memcpy(copy, init, size);
		memcpy((char *)copy + vsi->offset, &v, vsi->size); /* little-endian: low bytes */
		if (bpf_map__set_initial_value(rodata, copy, size)) {
			fail("'%s': setting the .rodata image failed: %s", assign, strerror(errno));
			free(copy);
			return -1;
		}
		free(copy);
		return 0;
	}
	fail("'%s': no variable '%s' in .rodata of the object", assign, name);
	list_rodata_vars(btf, sec);
	return -1;
}

/* Open OBJ, set its rodata (fields 4..), pin its maps under PIN_DIR/maps and load it;
 * with programs false no program is loaded (the maps only). */
static struct bpf_object *open_and_load(const struct op *op, bool programs)
{
	const char *path = op->f[1], *pin_dir = op->f[2];

	for (int attempt = 1;; attempt++) {
		struct bpf_object *obj;
		struct bpf_map *map;
		int err;

		obj = bpf_object__open_file(path, NULL);
		if (!obj) {
			fail("opening BPF object %s: %s%s", path, strerror(errno),
			     errno == ENOENT ? " (run `make setup` or `make -C ebpf`)" : "");
			return NULL;
		}
		for (int i = 4; i < op->nf; i++)
			if (set_rodata_var(obj, op->f[i]))
				goto err_close;
		if (!programs) {
			struct bpf_program *p;

			bpf_object__for_each_program(p, obj) {
				err = bpf_program__set_autoload(p, false);
				if (err) {
					fail("not loading program %s: %s", bpf_program__name(p),
					     strerror(-err));
					goto err_close;
				}
			}
		}
		bpf_object__for_each_map(map, obj) {
			char pin[PATH_MAX];

			if (bpf_map__is_internal(map))
				continue; /* .rodata/.data/.bss are per load, never shared */
			if (snprintf(pin, sizeof(pin), "%s/maps/%s", pin_dir, bpf_map__name(map)) >=
			    (int)sizeof(pin)) {
				fail("pin path for map %s too long", bpf_map__name(map));
				goto err_close;
			}
			err = bpf_map__set_pin_path(map, pin);
			if (err) {
				fail("setting pin path %s for map %s: %s", pin, bpf_map__name(map),
				     strerror(-err));
				goto err_close;
			}
		}
		err = bpf_object__load(obj);
		if (!err)
			return obj;
		bpf_object__close(obj);
		/* Another loader pinned the same map between our check and our pin. */
		if (err == -EEXIST && attempt < LOAD_ATTEMPTS)
			continue;
		fail("loading %s into the kernel (maps pinned under %s/maps): %s "
		     "(the libbpf messages above name the map or the verifier error; -v for the full log)",
		     path, pin_dir, strerror(-err));
		return NULL;
err_close:
		bpf_object__close(obj);
		return NULL;
	}
}

static int op_load(const struct op *op)
{
	const char *pin_dir = op->f[2], *prog_dir = strcmp(op->f[3], "-") ? op->f[3] : NULL;
	char maps[PATH_MAX];
	struct bpf_program *p;
	struct bpf_object *obj;
	struct stat st;
	bool first = true;

	snprintf(maps, sizeof(maps), "%s/maps", pin_dir);
	if (prepare_bpffs_dir(maps))
		return -1;
	if (prog_dir && stat(prog_dir, &st) == 0) {
		fail("program directory %s already exists: another load pinned its programs there "
		     "(detach and unpin them first, or choose another directory)", prog_dir);
		return -1;
	}
	obj = open_and_load(op, true);
	if (!obj)
		return -1;
	bpf_object__close(last_load.obj); /* NULL-safe */
	last_load.obj = obj;
	last_load.prog_dir = prog_dir;
	if (prog_dir) {
		if (prepare_bpffs_dir(prog_dir))
			return -1;
		bpf_object__for_each_program(p, obj) {
			char pin[PATH_MAX];
			int err;

			snprintf(pin, sizeof(pin), "%s/%s", prog_dir, bpf_program__name(p));
			err = bpf_program__pin(p, pin);
			if (err) {
				fail("pinning program %s at %s: %s", bpf_program__name(p), pin,
				     strerror(-err));
				return -1;
			}
		}
	}
	fputs("{\"op\": \"load\", \"obj\": ", stdout);
	json_str(op->f[1]);
	fputs(", \"prog_dir\": ", stdout);
	json_str(prog_dir);
	fputs(", \"programs\": [", stdout);
	bpf_object__for_each_program(p, obj) {
		fputs(first ? "" : ", ", stdout);
		json_str(bpf_program__name(p));
		first = false;
	}
	puts("]}");
	return 0;
}

static int op_maps(const struct op *op)
{
	char maps[PATH_MAX];
	struct bpf_object *obj;
	struct bpf_map *map;
	bool first = true;

	snprintf(maps, sizeof(maps), "%s/maps", op->f[2]);
	if (prepare_bpffs_dir(maps))
		return -1;
	obj = open_and_load(op, false);
	if (!obj)
		return -1;
	fputs("{\"op\": \"maps\", \"obj\": ", stdout);
	json_str(op->f[1]);
	fputs(", \"maps\": [", stdout);
	bpf_object__for_each_map(map, obj) {
		if (bpf_map__is_internal(map))
			continue;
		fputs(first ? "" : ", ", stdout);
		json_str(bpf_map__name(map));
		first = false;
	}
	puts("]}");
	bpf_object__close(obj); /* the pins keep the maps */
	return 0;
}

/* ---- tc attach / detach -------------------------------------------------------------- */

static int if_index(const char *dev, const char *netns)
{
	unsigned int ifindex = if_nametoindex(dev);

	if (!ifindex)
		fail("device %s not found in network namespace %s: %s", dev,
		     strcmp(netns, "-") ? netns : "(starting)", strerror(errno));
	return (int)ifindex;
}

static int do_attach(const struct op *op)
{
	DECLARE_LIBBPF_OPTS(bpf_tc_hook, hook);
	DECLARE_LIBBPF_OPTS(bpf_tc_opts, tco);
	const char *dev = op->f[2], *pin;
	int fd, ifindex, err;

	/* Resolve the program before switching: pins are looked up in our own namespace. */
	fd = prog_fd(op->f[4], &pin);
	if (fd < 0)
		return -1;
	if (enter_netns(op->f[1]))
		return -1;
	ifindex = if_index(dev, op->f[1]);
	if (!ifindex)
		return -1;
	hook.ifindex = ifindex;
	hook.attach_point = op->ap;
	hook_msg[0] = '\0';
	creating_hook = true;
	err = bpf_tc_hook_create(&hook);
	creating_hook = false;
	if (err && err != -EEXIST) {
		fputs(hook_msg, stderr);
		fail("creating the clsact qdisc on %s: %s", dev, strerror(-err));
		return -1;
	}
	tco.prog_fd = fd;
	err = bpf_tc_attach(&hook, &tco);
	if (err) {
		fail("attaching program %s to %s %s (tc, direct-action): %s", op->f[4], dev,
		     op->f[3], strerror(-err));
		return -1;
	}
	fputs("{\"op\": \"attach\", \"dev\": ", stdout);
	json_str(dev);
	printf(", \"dir\": \"%s\", \"prog\": ", op->f[3]);
	json_str(op->f[4]);
	printf(", \"prog_id\": %u, \"handle\": %u, \"priority\": %u, \"ifindex\": %d, \"prog_pin\": ",
	       tco.prog_id, tco.handle, tco.priority, ifindex);
	json_str(pin);
	puts("}");
	return 0;
}

static int do_detach(const struct op *op)
{
	DECLARE_LIBBPF_OPTS(bpf_tc_hook, hook);
	DECLARE_LIBBPF_OPTS(bpf_tc_opts, tco);
	const char *dev = op->f[2];
	int ifindex, err;

	if (enter_netns(op->f[1]))
		return -1;
	ifindex = if_index(dev, op->f[1]);
	if (!ifindex)
		return -1;
	hook.ifindex = ifindex;
	hook.attach_point = op->ap;
	tco.handle = op->handle;
	tco.priority = op->priority;
	err = bpf_tc_detach(&hook, &tco);
	if (err) {
		fail("detaching handle %u priority %u from %s %s: %s", op->handle, op->priority, dev,
		     op->f[3], strerror(-err));
		return -1;
	}
	fputs("{\"op\": \"detach\", \"dev\": ", stdout);
	json_str(dev);
	printf(", \"dir\": \"%s\", \"ifindex\": %d}\n", op->f[3], ifindex);
	return 0;
}

static int op_tc(const struct op *op)
{
	int rc = op->kind == OP_ATTACH ? do_attach(op) : do_detach(op);

	if (leave_netns(op->f[1]))
		return -1;
	return rc;
}

/* ---- maps -------------------------------------------------------------------------- */

static int check_sizes(const struct op *op, const struct bpf_map_info *info)
{
	if (op->key.n == info->key_size && (op->kind != OP_UPDATE || op->val.n == info->value_size))
		return 0;
	if (op->kind == OP_UPDATE)
		fail("map %s takes KEYHEX of %u bytes and VALUEHEX of %u bytes; got %zu and %zu",
		     op->f[1], info->key_size, info->value_size, op->key.n, op->val.n);
	else
		fail("map %s takes KEYHEX of %u bytes; got %zu", op->f[1], info->key_size, op->key.n);
	return -1;
}

static int op_update(const struct op *op)
{
	struct bpf_map_info info;
	int fd = map_fd(op->f[1], &info);

	if (fd < 0 || check_sizes(op, &info))
		return -1;
	if (bpf_map_update_elem(fd, op->key.p, op->val.p, BPF_ANY)) {
		fail("updating map %s: %s", op->f[1], strerror(errno));
		return -1;
	}
	return 0;
}

static int op_lookup(const struct op *op)
{
	struct bpf_map_info info;
	unsigned char *val;
	int fd = map_fd(op->f[1], &info);

	if (fd < 0 || check_sizes(op, &info))
		return -1;
	val = malloc(info.value_size);
	if (!val) {
		fail("out of memory");
		return -1;
	}
	print_hex(op->key.p, op->key.n);
	if (bpf_map_lookup_elem(fd, op->key.p, val)) {
		if (errno != ENOENT) {
			putchar('\n');
			fail("looking up an entry of %s: %s", op->f[1], strerror(errno));
			free(val);
			return -1;
		}
		fputs(" -", stdout);
	} else {
		putchar(' ');
		print_hex(val, info.value_size);
	}
	putchar('\n');
	free(val);
	return 0;
}

static int op_dump(const struct op *op)
{
	struct bpf_map_info info;
	unsigned char *key, *next, *val;
	bool first = true;
	long count = 0;
	int fd = map_fd(op->f[1], &info), rc = -1;

	if (fd < 0)
		return -1;
	key = malloc(info.key_size);
	next = malloc(info.key_size);
	val = malloc(info.value_size);
	if (!key || !next || !val) {
		fail("out of memory");
		goto out;
	}
	for (;;) {
		if (bpf_map_get_next_key(fd, first ? NULL : key, next)) {
			if (errno == ENOENT)
				break;
			fail("iterating map %s: %s", op->f[1], strerror(errno));
			goto out;
		}
		first = false;
		memcpy(key, next, info.key_size);
		if (bpf_map_lookup_elem(fd, key, val)) {
			if (errno == ENOENT)
				continue; /* deleted while iterating */
			fail("looking up an entry of %s: %s", op->f[1], strerror(errno));
			goto out;
		}
		print_hex(key, info.key_size);
		putchar(' ');
		print_hex(val, info.value_size);
		putchar('\n');
		count++;
	}
	printf("{\"op\": \"dump\", \"entries\": %ld}\n", count);
	rc = 0;
out:
	free(key);
	free(next);
	free(val);
	return rc;
}

/* ---- BPF_PROG_TEST_RUN ----------------------------------------------------------------- */

static int op_test_run(const struct op *op)
{
	DECLARE_LIBBPF_OPTS(bpf_test_run_opts, tr);
	unsigned char *ctx_out = NULL;
	const char *pin;
	int fd, err;

	fd = prog_fd(op->f[1], &pin);
	if (fd < 0)
		return -1;
	if (op->has_data) {
		tr.data_in = op->data.p;
		tr.data_size_in = op->data.n;
	}
	if (op->has_ctx) {
		ctx_out = calloc(1, op->ctx.n);
		if (!ctx_out) {
			fail("out of memory");
			return -1;
		}
		tr.ctx_in = op->ctx.p;
		tr.ctx_size_in = op->ctx.n;
		tr.ctx_out = ctx_out;
		tr.ctx_size_out = op->ctx.n;
	}
	tr.repeat = op->repeat;
	err = bpf_prog_test_run_opts(fd, &tr);
	if (err) {
		fail("BPF_PROG_TEST_RUN of %s with %zu bytes of data and %zu of context: %s%s",
		     op->f[1], op->has_data ? op->data.n : 0, op->has_ctx ? op->ctx.n : 0,
		     strerror(-err),
		     err == -EINVAL ? " (a tc program takes frames of 14 bytes up to about one page"
				      " minus skb overhead, ~3.7 KiB; the context must be a valid"
				      " struct __sk_buff prefix)" : "");
		free(ctx_out);
		return -1;
	}
	printf("{\"op\": \"test-run\", \"retval\": %u, \"duration_ns\": %u, \"data_len\": %zu, "
	       "\"repeat\": %ld, \"ctx_out\": ", tr.retval, tr.duration,
	       op->has_data ? op->data.n : 0, op->repeat);
	if (ctx_out) {
		putchar('"');
		print_hex(ctx_out, tr.ctx_size_out < op->ctx.n ? tr.ctx_size_out : op->ctx.n);
		putchar('"');
	} else {
		fputs("null", stdout);
	}
	puts("}");
	free(ctx_out);
	return 0;
}

/* ---- main ---------------------------------------------------------------------------- */

static int run_op(const struct op *op)
{
	cur = op;
	switch (op->kind) {
	case OP_LOAD: return op_load(op);
	case OP_MAPS: return op_maps(op);
	case OP_ATTACH:
	case OP_DETACH: return op_tc(op);
	case OP_UPDATE: return op_update(op);
	case OP_LOOKUP: return op_lookup(op);
	case OP_DUMP: return op_dump(op);
	case OP_TEST_RUN: return op_test_run(op);
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct op *ops = NULL, single;
	int n, rc = 0, first = 1;

	if (argc > first && (!strcmp(argv[first], "-v") || !strcmp(argv[first], "--verbose"))) {
		verbose = true;
		first++;
	}
	if (argc <= first) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[first], "-h") || !strcmp(argv[first], "--help") ||
	    !strcmp(argv[first], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[first], "batch")) {
		if (argc != first + 1) {
			fail("batch takes no arguments (operations come on stdin)");
			return 2;
		}
		n = read_batch(&ops);
		if (n < 0)
			return 2;
	} else {
		memset(&single, 0, sizeof(single));
		single.f = argv + first;
		single.nf = argc - first;
		cur = &single;
		if (parse_op(&single, NULL)) {
			usage(stderr);
			return 2;
		}
		ops = &single;
		n = 1;
	}
	libbpf_set_print(libbpf_print);
	/* Line-buffer stdout so each result is out before any later stderr. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	orig_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (orig_netns < 0) {
		fail("opening /proc/self/ns/net: %s", strerror(errno));
		return 1;
	}
	for (int i = 0; i < n && !rc; i++)
		if (run_op(&ops[i]))
			rc = 1;
	bpf_object__close(last_load.obj);
	return rc;
}
