/* User-space stand-ins for the kernel API that kernel/sch_voq.c uses, so that the
 * module's source, unchanged, can be compiled into a shared library (with
 * tests/kshim/voq_harness.c) and driven from Python (ctypes) on a host without module
 * loading: tests/unit/test_voq_kernel.py. Every linux/ and net/ header the module includes
 * resolves to this file (-I tests/kshim). kernel/sch_xcppace.c uses it too
 * (tests/kshim/xcppace_harness.c, tests/unit/test_xcppace_kernel.py): nested netlink
 * attributes, 128-bit division and the class operations are there for it.
 *
 * What is faithful: the types and helpers the module calls (skb->cb as qdisc_skb_cb, the
 * monotonic delivery time of 6.1, qdisc qlen/backlog/drops, netlink options and extack
 * messages, dump_stats). What is not: one thread, no softirq or RCU; the node timer, the
 * qdiscs' watchdogs and __netif_schedule only record what the harness must run; time is
 * shim_now, set by the harness. Locks count discipline errors (taking a held lock,
 * releasing a free one) in shim_lock_errors. */
#ifndef KSHIM_H
#define KSHIM_H
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <errno.h>
#include <assert.h>

typedef uint8_t u8; typedef uint16_t u16; typedef uint32_t u32; typedef uint64_t u64; typedef int32_t s32; typedef int64_t s64;
typedef uint8_t __u8; typedef uint16_t __u16; typedef uint32_t __u32; typedef uint64_t __u64;
typedef s64 ktime_t;
#define U64_MAX UINT64_MAX
#define U32_MAX UINT32_MAX
#define BIT_ULL(n) (1ULL << (n))
#define min(a, b) ((a) < (b) ? (a) : (b))
#define min3(a, b, c) min(min(a, b), c)
#define min_t(t, a, b) ((t)(a) < (t)(b) ? (t)(a) : (t)(b))
#define max_t(t, a, b) ((t)(a) > (t)(b) ? (t)(a) : (t)(b))
#define unlikely(x) (x)
#define __init
#define __exit
#define __read_mostly
#define BUILD_BUG_ON(c) _Static_assert(!(c), #c)
#define container_of(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))
#define KERNEL_VERSION(a, b, c) (((a) << 16) + ((b) << 8) + (c))
#define LINUX_VERSION_CODE KERNEL_VERSION(6, 1, 0)
#define GFP_KERNEL 0
static inline u64 div_u64(u64 a, u32 b) { return a / b; }
static inline u64 div64_u64(u64 a, u64 b) { return a / b; }
static inline u64 mul_u64_u64_div_u64(u64 a, u64 b, u64 c) { return (u64)((unsigned __int128)a * b / c); }
static inline int fls64(u64 x) { return x ? 64 - __builtin_clzll(x) : 0; }
static inline u64 ktime_to_ns(ktime_t k) { return (u64)k; }
static inline ktime_t ns_to_ktime(u64 ns) { return (ktime_t)ns; }
extern u64 shim_now;
static inline u64 ktime_get_ns(void) { return shim_now; }
static inline void *kzalloc(size_t s, int f) { return calloc(1, s); }
static inline void *kvcalloc(size_t n, size_t s, int f) { return calloc(n, s); }
static inline void kfree(void *p) { free(p); }
static inline void kvfree(void *p) { free(p); }

struct list_head { struct list_head *next, *prev; };
#define LIST_HEAD(name) struct list_head name = { &(name), &(name) }
static inline void list_add(struct list_head *n, struct list_head *h)
{ n->next = h->next; n->prev = h; h->next->prev = n; h->next = n; }
static inline void list_del(struct list_head *e) { e->prev->next = e->next; e->next->prev = e->prev; }
#define list_for_each_entry(pos, head, member) \
	for (pos = container_of((head)->next, __typeof__(*pos), member); &pos->member != (head); \
	     pos = container_of(pos->member.next, __typeof__(*pos), member))

typedef struct { int locked; } spinlock_t;
extern int shim_lock_errors;
static inline void spin_lock_init(spinlock_t *l) { l->locked = 0; }
static inline void spin_lock(spinlock_t *l) { if (l->locked) shim_lock_errors++; l->locked = 1; }
static inline void spin_unlock(spinlock_t *l) { if (!l->locked) shim_lock_errors++; l->locked = 0; }
#define spin_lock_bh spin_lock
#define spin_unlock_bh spin_unlock
struct mutex { int locked; };
#define DEFINE_MUTEX(n) struct mutex n
static inline void mutex_lock(struct mutex *m) { if (m->locked) shim_lock_errors++; m->locked = 1; }
static inline void mutex_unlock(struct mutex *m) { if (!m->locked) shim_lock_errors++; m->locked = 0; }
static inline void rcu_read_lock(void) {}
static inline void rcu_read_unlock(void) {}

enum hrtimer_restart { HRTIMER_NORESTART, HRTIMER_RESTART };
struct hrtimer { enum hrtimer_restart (*function)(struct hrtimer *); u64 expires; int armed; };
#define CLOCK_MONOTONIC 1
#define HRTIMER_MODE_ABS_SOFT 0
static inline void hrtimer_init(struct hrtimer *t, int c, int m) { t->armed = 0; }
static inline void hrtimer_start(struct hrtimer *t, ktime_t e, int m) { t->expires = e; t->armed = 1; }
static inline int hrtimer_cancel(struct hrtimer *t) { int a = t->armed; t->armed = 0; return a; }

struct sock;
struct sk_buff { struct sk_buff *next; ktime_t tstamp; u8 mono_delivery_time; char cb[48] __attribute__((aligned(8))); unsigned int len; int id; };
struct qdisc_skb_cb { unsigned int pkt_len; u16 slave_dev_queue_mapping; u16 tc_classid; unsigned char data[20]; };
static inline struct qdisc_skb_cb *qdisc_skb_cb(const struct sk_buff *skb) { return (struct qdisc_skb_cb *)skb->cb; }
static inline unsigned int qdisc_pkt_len(const struct sk_buff *skb) { return qdisc_skb_cb(skb)->pkt_len; }
static inline void qdisc_cb_private_validate(const struct sk_buff *skb, int sz) { assert(sz <= 20); }
static inline void skb_orphan(struct sk_buff *skb) {}
extern void shim_free(struct sk_buff *skb);
#define kfree_skb(s) shim_free(s)
static inline void skb_set_delivery_time(struct sk_buff *skb, ktime_t kt, bool mono)
{ skb->tstamp = kt; skb->mono_delivery_time = kt && mono; }

struct net { int id; };
struct net_device { struct net *net; };
static inline struct net *dev_net(const struct net_device *d) { return d->net; }
struct gnet_stats_queue { u32 backlog; u32 drops; };
struct Qdisc { struct { u32 qlen; } q; struct gnet_stats_queue qstats; unsigned long state;
	       struct net_device *dev; u64 bytes, packets; int port; long priv[512]; };
#define __QDISC_STATE_DEACTIVATED 1
static inline int test_bit(int nr, const unsigned long *a) { return (*a >> nr) & 1; }
static inline void *qdisc_priv(struct Qdisc *q) { return q->priv; }
static inline struct net_device *qdisc_dev(const struct Qdisc *q) { return q->dev; }
static inline struct Qdisc *qdisc_root(const struct Qdisc *q) { return (struct Qdisc *)q; }
static inline struct Qdisc *qdisc_root_sleeping(const struct Qdisc *q) { return (struct Qdisc *)q; }
extern void __netif_schedule(struct Qdisc *q);
static inline void qdisc_qstats_backlog_inc(struct Qdisc *s, const struct sk_buff *b) { s->qstats.backlog += qdisc_pkt_len(b); }
static inline void qdisc_qstats_backlog_dec(struct Qdisc *s, const struct sk_buff *b) { s->qstats.backlog -= qdisc_pkt_len(b); }
static inline void qdisc_qstats_drop(struct Qdisc *s) { s->qstats.drops++; }
static inline void qdisc_bstats_update(struct Qdisc *s, const struct sk_buff *b) { s->bytes += qdisc_pkt_len(b); s->packets++; }
#define NET_XMIT_SUCCESS 0
#define NET_XMIT_DROP 1
static inline int qdisc_drop(struct sk_buff *skb, struct Qdisc *s, struct sk_buff **to_free)
{ s->qstats.drops++; shim_free(skb); return NET_XMIT_DROP; }
struct qdisc_watchdog { u64 at; int armed; };
static inline void qdisc_watchdog_init(struct qdisc_watchdog *w, struct Qdisc *q) { w->armed = 0; }
static inline void qdisc_watchdog_schedule_ns(struct qdisc_watchdog *w, u64 t) { w->at = t; w->armed = 1; }
static inline void qdisc_watchdog_cancel(struct qdisc_watchdog *w) { w->armed = 0; }
struct sk_buff *qdisc_peek_dequeued(struct Qdisc *q);

struct nlattr { u16 nla_len; u16 nla_type; };
static inline int nla_len(const struct nlattr *a) { return a->nla_len - 4; }
static inline void *nla_data(const struct nlattr *a) { return (char *)a + 4; }
static inline int nla_type(const struct nlattr *a) { return a->nla_type & 0x3fff; }
static inline int nla_ok(const struct nlattr *a, int rem)
{ return rem >= (int)sizeof(*a) && a->nla_len >= sizeof(*a) && a->nla_len <= rem; }
static inline struct nlattr *nla_next(const struct nlattr *a, int *rem)
{ int len = (a->nla_len + 3) & ~3; *rem -= len; return (struct nlattr *)((char *)a + len); }
#define nla_for_each_nested(pos, nla, rem) \
	for (pos = (struct nlattr *)nla_data(nla), rem = nla_len(nla); nla_ok(pos, rem); pos = nla_next(pos, &(rem)))
struct netlink_ext_ack { const char *msg; };
#define NL_SET_ERR_MSG_MOD(e, m) do { if (e) (e)->msg = (m); } while (0)
#define TCA_OPTIONS 2
static inline int nla_put(struct sk_buff *s, int t, int l, const void *d) { return 0; }
static inline struct nlattr *nla_nest_start_noflag(struct sk_buff *s, int t) { static struct nlattr n; return &n; }
static inline int nla_nest_end(struct sk_buff *s, struct nlattr *n) { return 0; }
#define TC_H_MIN(h) ((h) & 0x0000FFFFU)
struct tcmsg { unsigned char tcm_family, tcm__pad1; unsigned short tcm__pad2; int tcm_ifindex;
	       u32 tcm_handle, tcm_parent, tcm_info; };
struct qdisc_walker { int stop; int skip; int count;
		      int (*fn)(struct Qdisc *, unsigned long, struct qdisc_walker *); };
struct gnet_dump { char buf[4096]; int len; };
static inline int gnet_stats_copy_app(struct gnet_dump *d, void *st, int len) { memcpy(d->buf, st, len); d->len = len; return 0; }

struct module;
#define THIS_MODULE NULL
struct Qdisc_class_ops {
	struct Qdisc *(*leaf)(struct Qdisc *, unsigned long);
	unsigned long (*find)(struct Qdisc *, u32);
	void (*walk)(struct Qdisc *, struct qdisc_walker *);
	int (*dump)(struct Qdisc *, unsigned long, struct sk_buff *, struct tcmsg *);
	int (*dump_stats)(struct Qdisc *, unsigned long, struct gnet_dump *);
};
struct Qdisc_ops {
	const struct Qdisc_class_ops *cl_ops;
	const char *id; int priv_size;
	int (*enqueue)(struct sk_buff *, struct Qdisc *, struct sk_buff **);
	struct sk_buff *(*dequeue)(struct Qdisc *);
	struct sk_buff *(*peek)(struct Qdisc *);
	int (*init)(struct Qdisc *, struct nlattr *, struct netlink_ext_ack *);
	void (*reset)(struct Qdisc *);
	void (*destroy)(struct Qdisc *);
	int (*change)(struct Qdisc *, struct nlattr *, struct netlink_ext_ack *);
	int (*dump)(struct Qdisc *, struct sk_buff *);
	int (*dump_stats)(struct Qdisc *, struct gnet_dump *);
	struct module *owner;
};
extern struct Qdisc_ops *shim_ops;
static inline int register_qdisc(struct Qdisc_ops *o) { shim_ops = o; return 0; }
static inline void unregister_qdisc(struct Qdisc_ops *o) { shim_ops = NULL; }
#define module_init(f) int shim_module_init(void) { return f(); }
#define module_exit(f) void shim_module_exit(void) { f(); }
#define MODULE_AUTHOR(x)
#define MODULE_LICENSE(x)
#define MODULE_DESCRIPTION(x)
#endif
