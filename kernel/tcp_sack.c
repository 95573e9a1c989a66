// SPDX-License-Identifier: GPL-2.0
/*
 * TCP SACK of the paper: Reno congestion control with the paper's initial RTO.
 *
 * Paper: A. Minakhmetov, C. Ware, L. Iannone, "TCP Congestion Control in
 * Datacenter Optical Packet Network on Hybrid Switches", section III-B, eq. 4-5,
 * Fig. 2a (TCP SACK after RFC 6675, a TCP mAIMD after reference [9]).
 *
 * Algorithm: Reno's slow start (cwnd += 1 per ACKed segment below ssthresh),
 * congestion avoidance (+1 per cwnd of ACKed segments), ssthresh = max(cwnd/2, 2)
 * on loss (eq. 4), cwnd = 1 on RTO; loss recovery with SACK is the kernel's. The
 * initial RTO is "reduced to 1 ms" (or the conventional 1 s for electronic
 * switches): the first data segment is timed with the profile's initial RTO, then
 * the kernel's RFC 6298 estimator runs from the first ACK of data.
 *
 * In Linux: the kernel's own `reno` functions (tcp_reno_ssthresh,
 * tcp_reno_cong_avoid, tcp_reno_undo_cwnd, exported by net/ipv4/tcp_cong.c), so the
 * window algorithm is exactly the built-in reno's; only .init differs: it arms the
 * profile's initial RTO (tcp_timeout_init(), the sock_ops TIMEOUT_INIT answer) for
 * the first data segment and drops the handshake's RTT sample (tcp_paper_init.h).
 * A module is needed because the built-in reno has no .init and the kernel offers no
 * other hook between the handshake's RTT sample and the first data segment.
 *
 * Differences from the paper (also in testbed/cc/profiles.py): fast recovery is the
 * kernel's PRR (ssthresh at once, cwnd converges to it during recovery); no rescue
 * retransmission (as in the paper); DSACK / timestamp undo stays on; RTO backoff
 * doubles; an initial RTO x D above TCP_RTO_MAX (120 s) is clamped to it.
 *
 * No parameters.
 */
#include <linux/module.h>
#include <net/tcp.h>
#include "tcp_paper_init.h"

static void sack_init(struct sock *sk)
{
	tcp_paper_init_rto(sk);
}

static struct tcp_congestion_ops tcp_sack __read_mostly = {
	.init		= sack_init,
	.ssthresh	= tcp_reno_ssthresh,
	.cong_avoid	= tcp_reno_cong_avoid,
	.undo_cwnd	= tcp_reno_undo_cwnd,
	.owner		= THIS_MODULE,
	.name		= "sack",
};

static int __init sack_register(void)
{
	return tcp_register_congestion_control(&tcp_sack);
}

static void __exit sack_unregister(void)
{
	tcp_unregister_congestion_control(&tcp_sack);
}

module_init(sack_register);
module_exit(sack_unregister);

MODULE_AUTHOR("optical-tcp-testbed");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("TCP SACK of the paper (reno, first data segment timed with the profile's initial RTO)");
