/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared core of tcp_saw and tcp_sawl (Stop-And-Wait and Stop-And-Wait-Longer).
 *
 * Not a module by itself (kernel/Makefile builds only tcp_*.c). Each module keeps
 * its own parameters and ops table and calls these helpers with its "extra" RTO
 * (0 for SAW, p x tau for SAWL) and its cap of T (parameter rto_max_ms). See
 * tcp_saw.c for the algorithm and the paper.
 *
 * Units: everything here is kernel (emulation) time; the profile multiplies the
 * paper's times by the time dilation factor D before they reach the module.
 */
#ifndef TCP_SAW_CORE_H
#define TCP_SAW_CORE_H

#include <linux/kernel.h>
#include <linux/moduleparam.h>
#include <linux/jiffies.h>
#include <net/tcp.h>
#include "tcp_paper_init.h"

/*
 * Paper's upper bound on T: "up to a maximum value of T_i = 60 s" (paper time). In
 * kernel time that is 60 s x D, but the kernel cannot arm a timer longer than
 * TCP_RTO_MAX (120 s), so the cap is a module parameter (rto_max_ms, 1..120000 ms)
 * that the profile sets to min(60 s x D, 120 s) and records in paper time.
 */
#define SAW_RTO_MAX_MS_LIMIT	120000U		/* jiffies_to_msecs(TCP_RTO_MAX) */

static int __maybe_unused saw_set_rto_max_ms(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 1, 120000);	/* SAW_RTO_MAX_MS_LIMIT */
}

static const struct kernel_param_ops saw_rto_max_ops = {
	.set = saw_set_rto_max_ms,
	.get = param_get_uint,
};

/* Per-socket state (lives in icsk_ca_priv, zeroed by the stack before init). */
struct saw_ca {
	u32 rto_us;	/* T_i of the paper, microseconds, without the SAWL extra */
};

/* Cap of T in microseconds from the module parameter (milliseconds). */
static inline u32 saw_rto_max_us(u32 rto_max_ms)
{
	return min_t(u32, rto_max_ms, SAW_RTO_MAX_MS_LIMIT) * USEC_PER_MSEC;
}

/* The RTO to arm, T + extra (eq. 3 for SAWL), in jiffies, within the kernel's limits. */
static inline u32 saw_rto_jiffies(struct sock *sk, u32 t_us, u32 extra_us)
{
	u64 total = (u64)t_us + extra_us;
	unsigned long j;

	if (total > (u64)jiffies_to_usecs(TCP_RTO_MAX))
		total = jiffies_to_usecs(TCP_RTO_MAX);
	j = usecs_to_jiffies((u32)total);
	/* The kernel cannot time less than its RTO floor (route rto_min / TCP_BPF_RTO_MIN). */
	j = max_t(unsigned long, j, tcp_rto_min(sk));
	return (u32)min_t(unsigned long, max_t(unsigned long, j, 1), TCP_RTO_MAX);
}

/*
 * Start of the data transfer (from .init, after the handshake): T = T_1, the
 * profile's initial RTO (tcp_timeout_init(): sock_ops TIMEOUT_INIT, paper time x D),
 * and the first data segment is armed with T_1 (+ p x tau for SAWL, eq. 3). The
 * handshake's RTT sample is dropped: the SYN-ACK is NOT a sample of eq. (2); the
 * first sample is the ACK of the first data segment.
 */
static inline void saw_core_init(struct sock *sk, u32 extra_us, u32 rto_max_ms)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct saw_ca *ca = inet_csk_ca(sk);

	BUILD_BUG_ON(sizeof(struct saw_ca) > ICSK_CA_PRIV_SIZE);
	ca->rto_us = min_t(u32, jiffies_to_usecs(tcp_paper_init_rto(sk)), saw_rto_max_us(rto_max_ms));
	inet_csk(sk)->icsk_rto = saw_rto_jiffies(sk, ca->rto_us, extra_us);
	tcp_snd_cwnd_set(tp, 1);
	/* A finite ssthresh: the stream is never "in initial slow start". */
	tp->snd_ssthresh = 2;
}

static inline u32 saw_core_ssthresh(struct sock *sk)
{
	return 2;
}

/*
 * Eq. (2): on an ACK with an RTT sample gamma, T = beta*gamma + (1-beta)*T (capped).
 * Before .init (the ACK of the SYN or SYN-ACK) the socket is not ours yet: ignored.
 */
static inline void saw_core_pkts_acked(struct sock *sk, const struct ack_sample *sample,
				       u32 beta_pct, u32 extra_us, u32 rto_max_ms)
{
	struct saw_ca *ca = inet_csk_ca(sk);

	if (!inet_csk(sk)->icsk_ca_initialized)
		return;
	if (sample->rtt_us > 0) {
		u64 t = (u64)beta_pct * (u32)sample->rtt_us + (u64)(100 - beta_pct) * ca->rto_us;

		ca->rto_us = (u32)min_t(u64, div_u64(t, 100), saw_rto_max_us(rto_max_ms));
	}
	/* Runs after tcp_set_rto() and before the timer is re-armed for the next segment. */
	inet_csk(sk)->icsk_rto = saw_rto_jiffies(sk, ca->rto_us, extra_us);
}

/* Eq. (6): one segment in flight, in every congestion state. */
static inline void saw_core_cong_control(struct sock *sk, const struct rate_sample *rs)
{
	tcp_snd_cwnd_set(tcp_sk(sk), 1);
}

static inline void saw_core_cong_avoid(struct sock *sk, u32 ack, u32 acked)
{
	/* Never called: cong_control is set. Required by the ops table. */
}

/*
 * Eq. (1): on an RTO, T = alpha*T. tcp_enter_loss() calls set_state(TCP_CA_Loss)
 * and afterwards tcp_retransmit_timer() doubles icsk_rto; we leave half of
 * alpha*T (+extra) there so that the doubling yields alpha*T (+extra), to within
 * one jiffy (rounding up).
 */
static inline void saw_core_set_state(struct sock *sk, u8 new_state, u32 alpha_pct, u32 extra_us,
				      u32 rto_max_ms)
{
	struct inet_connection_sock *icsk = inet_csk(sk);
	struct saw_ca *ca = inet_csk_ca(sk);
	u32 j;

	if (new_state != TCP_CA_Loss || !icsk->icsk_ca_initialized)
		return;
	tcp_snd_cwnd_set(tcp_sk(sk), 1);
	ca->rto_us = (u32)min_t(u64, div_u64((u64)ca->rto_us * alpha_pct, 100),
				saw_rto_max_us(rto_max_ms));
	j = saw_rto_jiffies(sk, ca->rto_us, extra_us);
	icsk->icsk_rto = max_t(u32, DIV_ROUND_UP(j, 2), 1);
}

static inline u32 saw_core_undo_cwnd(struct sock *sk)
{
	return 1;
}

#endif /* TCP_SAW_CORE_H */
