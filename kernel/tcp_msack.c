// SPDX-License-Identifier: GPL-2.0
/*
 * TCP mSACK: modified SACK with exponential growth always and RTO halving.
 *
 * Paper: A. Minakhmetov, C. Ware, L. Iannone, "TCP Congestion Control in
 * Datacenter Optical Packet Network on Hybrid Switches", section III-B, Fig. 2b
 * (a TCP mAIMD after reference [9] of that paper).
 *
 * Algorithm:
 *   - every (S)ACKed segment adds one segment to CWND: exponential growth in
 *     time, always; there is no congestion avoidance phase (no ssthresh);
 *   - three duplicate ACKs do not reduce CWND (no fast-recovery reduction);
 *   - an RTO halves CWND (at least one segment) instead of resetting it to one.
 *   - initial RTO 1 ms (set per host by the profile's sock_ops program): the first
 *     data segment is timed with it, then the kernel's RFC 6298 estimator runs
 *     from the first ACK of data (the handshake's RTT sample is dropped, see
 *     tcp_paper_init.h).
 *
 * In Linux: cong_control owns cwnd in every congestion state (so neither PRR nor
 * the end-of-recovery cwnd = ssthresh applies); the module keeps its own cwnd and
 * grows it by rate_sample.acked_sacked while the flow is cwnd-limited;
 * set_state(TCP_CA_Loss), which tcp_enter_loss() calls on each RTO after it set
 * cwnd to 1, restores half of the previous cwnd.
 *
 * Differences from the paper (also in testbed/cc/profiles.py):
 *  - loss detection itself is the kernel's: with the profile's settings
 *    (tcp_recovery=0, tcp_reordering=max_reordering, no TLP/F-RTO) dupACKs do not
 *    trigger fast retransmit before tcp_reordering dupACKs; if they do (reordering
 *    limit reached), the segment is retransmitted but cwnd is not reduced;
 *  - growth pauses while the flow is not cwnd-limited (application- or
 *    receiver-window-limited), so cwnd does not grow without bound;
 *  - undo of a spurious RTO keeps the halved cwnd (the paper has no undo).
 *
 * Parameters (bounds-checked at load and at runtime writes):
 *   rto_decrease_pct  1..100 (default 50)  cwnd after an RTO, percent of before
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <net/tcp.h>
#include "tcp_paper_init.h"

static unsigned int rto_decrease_pct __read_mostly = 50;

static int set_decrease(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 1, 100);
}

static const struct kernel_param_ops decrease_ops = { .set = set_decrease, .get = param_get_uint };
module_param_cb(rto_decrease_pct, &decrease_ops, &rto_decrease_pct, 0644);
MODULE_PARM_DESC(rto_decrease_pct, "cwnd after an RTO in percent of cwnd before, 1..100 (default 50)");

struct msack_ca {
	u32 cwnd;	/* the module's cwnd in segments (0: not yet known) */
};

static void msack_init(struct sock *sk)
{
	struct msack_ca *ca = inet_csk_ca(sk);

	BUILD_BUG_ON(sizeof(struct msack_ca) > ICSK_CA_PRIV_SIZE);
	tcp_paper_init_rto(sk);
	ca->cwnd = tcp_snd_cwnd(tcp_sk(sk));
	tcp_sk(sk)->snd_ssthresh = TCP_INFINITE_SSTHRESH;
}

static u32 msack_ssthresh(struct sock *sk)
{
	/* Reported only (ss -i, tcp_probe); cwnd never looks at it. */
	return max(tcp_snd_cwnd(tcp_sk(sk)) >> 1U, 2U);
}

static void msack_cong_avoid(struct sock *sk, u32 ack, u32 acked)
{
	/* Never called: cong_control is set. Required by the ops table. */
}

static void msack_cong_control(struct sock *sk, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct msack_ca *ca = inet_csk_ca(sk);

	if (!ca->cwnd)
		ca->cwnd = tcp_snd_cwnd(tp);
	if (rs->acked_sacked > 0 && tcp_is_cwnd_limited(sk))
		ca->cwnd = min_t(u32, ca->cwnd + rs->acked_sacked, tp->snd_cwnd_clamp);
	tcp_snd_cwnd_set(tp, max(ca->cwnd, 1U));
}

static void msack_set_state(struct sock *sk, u8 new_state)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct msack_ca *ca = inet_csk_ca(sk);

	if (new_state != TCP_CA_Loss || !inet_csk(sk)->icsk_ca_initialized)
		return;
	if (!ca->cwnd)
		ca->cwnd = max(tp->prior_cwnd, 1U);
	ca->cwnd = max_t(u32, div_u64((u64)ca->cwnd * READ_ONCE(rto_decrease_pct), 100), 1U);
	tcp_snd_cwnd_set(tp, ca->cwnd);
	tp->snd_cwnd_cnt = 0;
}

static u32 msack_undo_cwnd(struct sock *sk)
{
	struct msack_ca *ca = inet_csk_ca(sk);

	return max(ca->cwnd, 1U);
}

static struct tcp_congestion_ops tcp_msack __read_mostly = {
	.init		= msack_init,
	.ssthresh	= msack_ssthresh,
	.cong_avoid	= msack_cong_avoid,
	.cong_control	= msack_cong_control,
	.set_state	= msack_set_state,
	.undo_cwnd	= msack_undo_cwnd,
	.owner		= THIS_MODULE,
	.name		= "msack",
};

static int __init msack_register(void)
{
	return tcp_register_congestion_control(&tcp_msack);
}

static void __exit msack_unregister(void)
{
	tcp_unregister_congestion_control(&tcp_msack);
}

module_init(msack_register);
module_exit(msack_unregister);

MODULE_AUTHOR("optical-tcp-testbed");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("TCP mSACK (exponential growth always, RTO halves cwnd, dupACKs keep cwnd)");
