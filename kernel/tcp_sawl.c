// SPDX-License-Identifier: GPL-2.0
/*
 * TCP Stop-And-Wait-Longer (SAWL): SAW whose RTO is extended by p x tau.
 *
 * Paper: A. Minakhmetov, C. Ware, L. Iannone, "TCP Congestion Control in
 * Datacenter Optical Packet Network on Hybrid Switches", section III-A, eq. 3.
 *
 * Algorithm: everything of SAW (tcp_saw.c: one segment in flight, eq. 1 backoff
 * by alpha, eq. 2 EWMA with beta), and the RTO actually armed is
 *   T'_i = T_i + p * tau                                             (eq. 3)
 * where tau is the duration of one full-sized packet at the host's link rate, so
 * that a packet buffered up to p times in hybrid switches is not retransmitted.
 * The paper uses p = 4 ("SAWL") and p = 0 (plain SAW).
 *
 * In Linux: as tcp_saw, with p * tau added whenever icsk_rto is written. The
 * profile (testbed/cc/profiles.py) sets tau_ns from the host's link rate and the
 * time dilation factor: tau_ns = MTU * 8 / rate * D.
 *
 * The first data segment is armed with T_1 + p * tau (T_1 from the profile's
 * initial RTO, see tcp_paper_init.h); the SYN-ACK is not an RTT sample.
 *
 * Differences from the paper: those of tcp_saw.c, and p / tau are per module
 * (hence per guest kernel), not per socket: hosts of one experiment that use SAWL
 * must share one link rate (the profile refuses a conflicting tau).
 *
 * Parameters (bounds-checked at load and at runtime writes):
 *   p          0..64        (default 4)    packets' worth of extra wait
 *   tau_ns     0..1000000000 (default 7200: 9 kB at 10 Gbit/s) packet duration, ns
 *   beta_pct   1..99        (default 50)
 *   alpha_pct  100..1000    (default 110)
 *   rto_max_ms 1..120000    (default 60000) cap of T, ms of kernel time (tcp_saw.c)
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <net/tcp.h>
#include "tcp_saw_core.h"

static unsigned int p __read_mostly = 4;
static unsigned int tau_ns __read_mostly = 7200;
static unsigned int beta_pct __read_mostly = 50;
static unsigned int alpha_pct __read_mostly = 110;
static unsigned int rto_max_ms __read_mostly = 60000;

static int set_p(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 0, 64);
}

static int set_tau(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 0, 1000000000);
}

static int set_beta(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 1, 99);
}

static int set_alpha(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 100, 1000);
}

static const struct kernel_param_ops p_ops = { .set = set_p, .get = param_get_uint };
static const struct kernel_param_ops tau_ops = { .set = set_tau, .get = param_get_uint };
static const struct kernel_param_ops beta_ops = { .set = set_beta, .get = param_get_uint };
static const struct kernel_param_ops alpha_ops = { .set = set_alpha, .get = param_get_uint };

module_param_cb(p, &p_ops, &p, 0644);
MODULE_PARM_DESC(p, "RTO extension in packet durations, 0..64 (default 4)");
module_param_cb(tau_ns, &tau_ops, &tau_ns, 0644);
MODULE_PARM_DESC(tau_ns, "packet duration tau in ns, 0..1000000000 (default 7200)");
module_param_cb(beta_pct, &beta_ops, &beta_pct, 0644);
MODULE_PARM_DESC(beta_pct, "RTO smoothing beta in percent, 1..99 (default 50)");
module_param_cb(alpha_pct, &alpha_ops, &alpha_pct, 0644);
MODULE_PARM_DESC(alpha_pct, "RTO backoff factor alpha in percent, 100..1000 (default 110)");
module_param_cb(rto_max_ms, &saw_rto_max_ops, &rto_max_ms, 0644);
MODULE_PARM_DESC(rto_max_ms, "cap of T in ms of kernel time (the paper's 60 s x D), "
		 "1..120000 (TCP_RTO_MAX; default 60000)");

/* p * tau in microseconds (at most 64 s, fits u32). */
static u32 sawl_extra_us(void)
{
	return (u32)div_u64((u64)READ_ONCE(p) * READ_ONCE(tau_ns), NSEC_PER_USEC);
}

static void sawl_init(struct sock *sk)
{
	saw_core_init(sk, sawl_extra_us(), READ_ONCE(rto_max_ms));
}

static void sawl_pkts_acked(struct sock *sk, const struct ack_sample *sample)
{
	saw_core_pkts_acked(sk, sample, READ_ONCE(beta_pct), sawl_extra_us(),
			    READ_ONCE(rto_max_ms));
}

static void sawl_set_state(struct sock *sk, u8 new_state)
{
	saw_core_set_state(sk, new_state, READ_ONCE(alpha_pct), sawl_extra_us(),
			   READ_ONCE(rto_max_ms));
}

static struct tcp_congestion_ops tcp_sawl __read_mostly = {
	.init		= sawl_init,
	.ssthresh	= saw_core_ssthresh,
	.cong_avoid	= saw_core_cong_avoid,
	.cong_control	= saw_core_cong_control,
	.pkts_acked	= sawl_pkts_acked,
	.set_state	= sawl_set_state,
	.undo_cwnd	= saw_core_undo_cwnd,
	.owner		= THIS_MODULE,
	.name		= "sawl",
};

static int __init sawl_register(void)
{
	return tcp_register_congestion_control(&tcp_sawl);
}

static void __exit sawl_unregister(void)
{
	tcp_unregister_congestion_control(&tcp_sawl);
}

module_init(sawl_register);
module_exit(sawl_unregister);

MODULE_AUTHOR("optical-tcp-testbed");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("TCP Stop-And-Wait-Longer (SAW with RTO + p*tau)");
