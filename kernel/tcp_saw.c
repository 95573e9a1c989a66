// SPDX-License-Identifier: GPL-2.0
/*
 * TCP Stop-And-Wait (SAW): at most one data segment in flight.
 *
 * Paper: A. Minakhmetov, C. Ware, L. Iannone, "TCP Congestion Control in
 * Datacenter Optical Packet Network on Hybrid Switches", section III-A
 * (TCP SAW after reference [9] of that paper).
 *
 * Algorithm (paper eq. 1, 2, 6):
 *   CWND_i = SMSS                               one segment in flight, always
 *   on RTO expiry:        T_i = alpha * T_{i-1},  up to 60 s     (alpha = 1.1)
 *   on ACK with RTT gamma: T_i = beta * gamma + (1 - beta) * T_{i-1}  (beta = 0.5)
 *   initial RTO T_1 = 1 ms (set per host by the profile's sock_ops program)
 *
 * In Linux: .init (run by tcp_init_transfer() after the handshake) sets T = T_1
 * from tcp_timeout_init() (the profile's sock_ops TIMEOUT_INIT answer, paper time
 * x D in jiffies) and arms it for the first data segment; the handshake's RTT
 * sample is dropped, so the SYN-ACK is NOT a sample of eq. 2 (tcp_paper_init.h).
 * cong_control pins cwnd to 1 in every congestion state; pkts_acked keeps T (eq. 2,
 * from the stack's per-ACK RTT sample: the ACKed segment's transmission time, or
 * its echoed timestamp when it was retransmitted) and writes it to icsk_rto before
 * the retransmission timer is re-armed; set_state(TCP_CA_Loss) applies eq. 1 and
 * leaves ceil(alpha*T/2) in icsk_rto, because the RTO handler doubles icsk_rto
 * afterwards (so the effective factor is alpha to within one jiffy).
 *
 * Differences from the paper (also in testbed/cc/profiles.py):
 *  - RTO granularity is one jiffy (4 ms at HZ=250): use time dilation D so that
 *    paper times x D are many jiffies.
 *  - The RTO is never below the socket's rto_min (profile sets it to one jiffy).
 *  - The cap of T is rto_max_ms (the profile's min(60 s x D, TCP_RTO_MAX = 120 s)):
 *    above D = 2 the kernel's 120 s limit, i.e. 120 s / D of paper time.
 *  - An initial RTO x D above TCP_RTO_MAX is clamped to it by tcp_timeout_init()
 *    (the profile records the effective value).
 *  - The SYN itself backs off by doubling (kernel code outside the module).
 *  - Delayed ACKs are turned off by the profile (route quickack), not here.
 *
 * Parameters (bounds-checked; out-of-range values are refused at load and at
 * runtime writes to /sys/module/tcp_saw/parameters/):
 *   beta_pct    1..99     (default 50)    beta of eq. 2, in percent
 *   alpha_pct   100..1000 (default 110)   alpha of eq. 1, in percent
 *   rto_max_ms  1..120000 (default 60000) cap of T, ms of kernel time
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <net/tcp.h>
#include "tcp_saw_core.h"

static unsigned int beta_pct __read_mostly = 50;
static unsigned int alpha_pct __read_mostly = 110;
static unsigned int rto_max_ms __read_mostly = 60000;

static int set_beta(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 1, 99);
}

static int set_alpha(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 100, 1000);
}

static const struct kernel_param_ops beta_ops = { .set = set_beta, .get = param_get_uint };
static const struct kernel_param_ops alpha_ops = { .set = set_alpha, .get = param_get_uint };

module_param_cb(beta_pct, &beta_ops, &beta_pct, 0644);
MODULE_PARM_DESC(beta_pct, "RTO smoothing beta in percent, 1..99 (default 50): T = beta*RTT + (1-beta)*T");
module_param_cb(alpha_pct, &alpha_ops, &alpha_pct, 0644);
MODULE_PARM_DESC(alpha_pct, "RTO backoff factor alpha in percent, 100..1000 (default 110)");
module_param_cb(rto_max_ms, &saw_rto_max_ops, &rto_max_ms, 0644);
MODULE_PARM_DESC(rto_max_ms, "cap of T in ms of kernel time (the paper's 60 s x D), "
		 "1..120000 (TCP_RTO_MAX; default 60000)");

static void saw_init(struct sock *sk)
{
	saw_core_init(sk, 0, READ_ONCE(rto_max_ms));
}

static void saw_pkts_acked(struct sock *sk, const struct ack_sample *sample)
{
	saw_core_pkts_acked(sk, sample, READ_ONCE(beta_pct), 0,
			    READ_ONCE(rto_max_ms));
}

static void saw_set_state(struct sock *sk, u8 new_state)
{
	saw_core_set_state(sk, new_state, READ_ONCE(alpha_pct), 0,
			   READ_ONCE(rto_max_ms));
}

static struct tcp_congestion_ops tcp_saw __read_mostly = {
	.init		= saw_init,
	.ssthresh	= saw_core_ssthresh,
	.cong_avoid	= saw_core_cong_avoid,
	.cong_control	= saw_core_cong_control,
	.pkts_acked	= saw_pkts_acked,
	.set_state	= saw_set_state,
	.undo_cwnd	= saw_core_undo_cwnd,
	.owner		= THIS_MODULE,
	.name		= "saw",
};

static int __init saw_register(void)
{
	return tcp_register_congestion_control(&tcp_saw);
}

static void __exit saw_unregister(void)
{
	tcp_unregister_congestion_control(&tcp_saw);
}

module_init(saw_register);
module_exit(saw_unregister);

MODULE_AUTHOR("optical-tcp-testbed");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("TCP Stop-And-Wait (one segment in flight, RTO backoff alpha, EWMA beta)");
