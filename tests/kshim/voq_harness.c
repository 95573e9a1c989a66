/* Drives kernel/sch_voq.c (compiled as is, against tests/kshim/kshim.h) from Python
 * (tests/unit/test_voq_kernel.py, ctypes): the qdisc ops of the member qdiscs of a node
 * (add with packed struct tc_voq_qopt options, change, delete, reset, enqueue with the optical
 * switch's cb words and stamp, dequeue, dump_stats), the node's timer, the members'
 * watchdogs, the kicks (__netif_schedule) and the skbs freed. */
#include "sch_voq.c"
#include <stdio.h>

u64 shim_now;
int shim_lock_errors;
struct Qdisc_ops *shim_ops;
static u64 kicked;
static struct Qdisc *qd[VOQ_MAX_PORTS];
static struct net nets[2];
static struct net_device devs[2][VOQ_MAX_PORTS];
static int freed[1 << 20];
static int nfreed;

void shim_free(struct sk_buff *skb) { if (nfreed < (1 << 20)) freed[nfreed++] = skb->id; free(skb); }
void __netif_schedule(struct Qdisc *q) { kicked |= BIT_ULL(q->port); }
struct sk_buff *qdisc_peek_dequeued(struct Qdisc *q) { return NULL; }

int h_init(void) { return shim_module_init(); }

/* Add a voq qdisc on port `port` of namespace `ns` (0/1): 0 or -errno (msg: extack). */
int h_add(int ns, int port, const void *opt, int optlen, char *msg, int msglen)
{
	struct Qdisc *s = calloc(1, sizeof(*s));
	struct { struct nlattr a; char d[256]; } at;
	struct netlink_ext_ack ext = { 0 };
	int err;

	devs[ns][port].net = &nets[ns];
	s->dev = &devs[ns][port];
	s->port = port;
	at.a.nla_len = 4 + optlen;
	memcpy(at.d, opt, optlen);
	err = shim_ops->init(s, &at.a, &ext);
	if (err) {
		shim_ops->destroy(s);
		free(s);
		snprintf(msg, msglen, "%s", ext.msg ? ext.msg : "");
		return err;
	}
	if (ns == 0)
		qd[port] = s;
	else
		free(s);	/* (leaks the membership on purpose: only for refusal tests) */
	return 0;
}

/* Change the qdisc of port `port` (namespace 0) to options `opt`: 0 or -errno (msg: extack). */
int h_change(int port, const void *opt, int optlen, char *msg, int msglen)
{
	struct { struct nlattr a; char d[256]; } at;
	struct netlink_ext_ack ext = { 0 };
	int err;

	at.a.nla_len = 4 + optlen;
	memcpy(at.d, opt, optlen);
	err = shim_ops->change(qd[port], &at.a, &ext);
	snprintf(msg, msglen, "%s", ext.msg ? ext.msg : "");
	return err;
}

void h_del(int port) { shim_ops->destroy(qd[port]); free(qd[port]); qd[port] = NULL; }
void h_reset(int port) { shim_ops->reset(qd[port]); }

int h_enqueue(int port, int id, u64 a, u32 len, u32 decision, u32 in_port, u64 now)
{
	struct sk_buff *skb = calloc(1, sizeof(*skb));
	u32 *w = (u32 *)qdisc_skb_cb(skb)->data;

	shim_now = now;
	skb->id = id;
	skb->tstamp = a;
	skb->mono_delivery_time = 1;
	skb->len = len;
	qdisc_skb_cb(skb)->pkt_len = len;
	w[0] = decision;
	w[1] = in_port;
	return shim_ops->enqueue(skb, qd[port], NULL);
}

/* One dequeue: 1 with the packet's id and stamp (its monotonic delivery time), or 0. */
int h_dequeue(int port, u64 now, int *id, u64 *stamp)
{
	struct sk_buff *skb;

	shim_now = now;
	skb = shim_ops->dequeue(qd[port]);
	if (!skb)
		return 0;
	*id = skb->id;
	*stamp = skb->mono_delivery_time ? (u64)skb->tstamp : 0;
	free(skb);
	return 1;
}

u64 h_kicked(void) { u64 k = kicked; kicked = 0; return k; }

static struct voq_node *node_of(int port) { return ((struct voq_sched *)qdisc_priv(qd[port]))->node; }

int h_timer(int port, u64 *at) { struct voq_node *n = node_of(port); *at = n->timer.expires; return n->timer.armed; }

void h_fire(int port, u64 now)
{
	struct voq_node *n = node_of(port);

	shim_now = now;
	n->timer.armed = 0;
	n->timer.function(&n->timer);
}

int h_watchdog(int port, u64 *at)
{
	struct voq_sched *q = qdisc_priv(qd[port]);

	*at = q->watchdog.at;
	return q->watchdog.armed;
}

void h_watchdog_clear(int port) { ((struct voq_sched *)qdisc_priv(qd[port]))->watchdog.armed = 0; }

int h_stats(int port, void *buf)
{
	struct gnet_dump d;
	int err = shim_ops->dump_stats(qd[port], &d);

	memcpy(buf, d.buf, d.len);
	return err ? err : d.len;
}

int h_freed(int *ids, int max)
{
	int k = nfreed < max ? nfreed : max;

	memcpy(ids, freed, k * sizeof(int));
	nfreed = 0;
	return k;
}

u32 h_qlen(int port) { return qd[port]->q.qlen; }
u32 h_backlog(int port) { return qd[port]->qstats.backlog; }
int h_lock_errors(void) { return shim_lock_errors; }
int h_nodes(void) { int k = 0; struct voq_node *n; list_for_each_entry(n, &voq_nodes, link) k++; return k; }
