/* Drives kernel/sch_xcppace.c (compiled as is, against tests/kshim/kshim.h) from Python
 * (tests/unit/test_xcppace_kernel.py, ctypes): one xcppace qdisc (add with its packed
 * TCA_OPTIONS nest, change, delete, reset, enqueue with the optical switch's cb words and
 * stamp, dequeue, dump_stats of the qdisc and of a class, the class walk), its timer, its
 * watchdog, its kicks (__netif_schedule) and the skbs freed. */
#include "sch_xcppace.c"
#include <stdio.h>

u64 shim_now;
int shim_lock_errors;
struct Qdisc_ops *shim_ops;
static int kicked;
static struct Qdisc *qd;
static struct net net0;
static struct net_device dev0;
static int freed[1 << 20];
static int nfreed;

void shim_free(struct sk_buff *skb) { if (nfreed < (1 << 20)) freed[nfreed++] = skb->id; free(skb); }
void __netif_schedule(struct Qdisc *q) { kicked = 1; }
struct sk_buff *qdisc_peek_dequeued(struct Qdisc *q) { return NULL; }

int h_init(void) { return shim_module_init(); }

static struct nlattr *h_attr(const void *opt, int optlen)
{
	struct nlattr *a = calloc(1, 4 + optlen);

	a->nla_len = 4 + optlen;
	memcpy(nla_data(a), opt, optlen);
	return a;
}

/* Add the qdisc with TCA_OPTIONS = opt (optlen bytes; NULL: none) at real time now: 0 or
 * -errno (msg: extack). */
int h_add(const void *opt, int optlen, u64 now, char *msg, int msglen)
{
	struct Qdisc *s = calloc(1, sizeof(*s));
	struct nlattr *a = opt ? h_attr(opt, optlen) : NULL;
	struct netlink_ext_ack ext = { 0 };
	int err;

	shim_now = now;
	dev0.net = &net0;
	s->dev = &dev0;
	err = shim_ops->init(s, a, &ext);
	free(a);
	snprintf(msg, msglen, "%s", ext.msg ? ext.msg : "");
	if (err) {
		shim_ops->destroy(s);
		free(s);
		return err;
	}
	qd = s;
	return 0;
}

/* A change with TCA_OPTIONS = opt at real time now: 0 or -errno (msg: extack). */
int h_change(const void *opt, int optlen, u64 now, char *msg, int msglen)
{
	struct nlattr *a = h_attr(opt, optlen);
	struct netlink_ext_ack ext = { 0 };
	int err;

	shim_now = now;
	err = shim_ops->change(qd, a, &ext);
	free(a);
	snprintf(msg, msglen, "%s", ext.msg ? ext.msg : "");
	return err;
}

void h_del(void) { shim_ops->destroy(qd); free(qd); qd = NULL; }
void h_reset(void) { shim_ops->reset(qd); }

int h_enqueue(int id, u64 a, u32 len, u32 decision, u32 cls, int mono, u64 now)
{
	struct sk_buff *skb = calloc(1, sizeof(*skb));
	u32 *w = (u32 *)qdisc_skb_cb(skb)->data;

	shim_now = now;
	skb->id = id;
	skb->tstamp = a;
	skb->mono_delivery_time = mono;
	skb->len = len;
	qdisc_skb_cb(skb)->pkt_len = len;
	w[0] = decision;
	w[2] = cls;
	return shim_ops->enqueue(skb, qd, NULL);
}

/* One dequeue: 1 with the packet's id and stamp (its monotonic delivery time), or 0. */
int h_dequeue(u64 now, int *id, u64 *stamp)
{
	struct sk_buff *skb;

	shim_now = now;
	skb = shim_ops->dequeue(qd);
	if (!skb)
		return 0;
	*id = skb->id;
	*stamp = skb->mono_delivery_time ? (u64)skb->tstamp : 0;
	free(skb);
	return 1;
}

int h_kicked(void) { int k = kicked; kicked = 0; return k; }

static struct xp_sched *priv(void) { return qdisc_priv(qd); }

int h_timer(u64 *at) { *at = priv()->timer.expires; return priv()->timer.armed; }

void h_fire(u64 now)
{
	shim_now = now;
	priv()->timer.armed = 0;
	priv()->timer.function(&priv()->timer);
}

int h_watchdog(u64 *at) { *at = priv()->watchdog.at; return priv()->watchdog.armed; }
void h_watchdog_clear(void) { priv()->watchdog.armed = 0; }

int h_stats(void *buf)
{
	struct gnet_dump d;
	int err = shim_ops->dump_stats(qd, &d);

	memcpy(buf, d.buf, d.len);
	return err ? err : d.len;
}

/* The class dump of class minor cl (cls + 1): its xstats' length, or -1. */
int h_class_stats(unsigned long cl, void *buf)
{
	struct gnet_dump d;
	int err = shim_ops->cl_ops->dump_stats(qd, cl, &d);

	if (err)
		return -1;
	memcpy(buf, d.buf, d.len);
	return d.len;
}

static unsigned long walked[256];
static int nwalked;

static int h_walk_fn(struct Qdisc *s, unsigned long cl, struct qdisc_walker *w)
{
	struct tcmsg tcm = { .tcm_handle = 0x80010000U };

	shim_ops->cl_ops->dump(s, cl, NULL, &tcm);
	walked[nwalked++] = tcm.tcm_handle;
	return nwalked >= w->stop + 1000 ? -1 : 0;
}

/* Walk the classes from `skip` on: the handles the class dump gives them (into out). */
int h_walk(int skip, u32 *out)
{
	struct qdisc_walker w = { .stop = 0, .skip = skip, .count = 0, .fn = h_walk_fn };
	int k;

	nwalked = 0;
	shim_ops->cl_ops->walk(qd, &w);
	for (k = 0; k < nwalked; k++)
		out[k] = (u32)walked[k];
	return nwalked;
}

unsigned long h_find(u32 classid) { return shim_ops->cl_ops->find(qd, classid); }

int h_freed(int *ids, int max)
{
	int k = nfreed < max ? nfreed : max;

	memcpy(ids, freed, k * sizeof(int));
	nfreed = 0;
	return k;
}

u32 h_qlen(void) { return qd->q.qlen; }
u32 h_backlog(void) { return qd->qstats.backlog; }
int h_lock_errors(void) { return shim_lock_errors; }
