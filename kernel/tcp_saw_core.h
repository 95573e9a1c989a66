/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared core of tcp_saw and tcp_sawl (Stop-And-Wait and Stop-And-Wait-Longer).
 *
 * Not a module by itself (kernel/Makefile builds only tcp_*.c). Each module keeps
 * its own parameters and ops table and calls these helpers with its "extra" RTO
 * (0 for SAW, p x tau for SAWL). See tcp_saw.c for the algorithm and the paper.
 */
#ifndef TCP_SAW_CORE_H
#define TCP_SAW_CORE_H

#include <linux/kernel.h>
#include <linux/jiffies.h>
#include <net/tcp.h>

/* Paper's upper bound on the RTO: "up to a maximum value of T_i = 60 s". */
#define SAW_RTO_MAX_US (60U * USEC_PER_SEC)

/* Per-socket state (lives in icsk_ca_priv, zeroed by the stack before init). */
struct saw_ca {
	u32 rto_us;	/* T_i of the paper, microseconds, without the SAWL extra */
};

static inline u32 saw_rto_jiffies(struct sock *sk, u32 t_us, u32 extra_us)
{
	u64 total = (u64)t_us + extra_us;
	unsigned long j;

	if (total > SAW_RTO_MAX_US)
		total = SAW_RTO_MAX_US;
	j = usecs_to_jiffies((u32)total);
	/* The kernel cannot time less than its RTO floor (route rto_min / TCP_BPF_RTO_MIN). */
	j = max_t(unsigned long, j, tcp_rto_min(sk));
	return (u32)min_t(unsigned long, max_t(unsigned long, j, 1), TCP_RTO_MAX);
}

static inline void saw_core_init(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct saw_ca *ca = inet_csk_ca(sk);

	BUILD_BUG_ON(sizeof(struct saw_ca) > ICSK_CA_PRIV_SIZE);
	/* T starts from the RTO the handshake left (initial RTO from sock_ops, or the
	 * kernel's estimate from the SYN RTT sample). */
	ca->rto_us = jiffies_to_usecs(inet_csk(sk)->icsk_rto);
	tcp_snd_cwnd_set(tp, 1);
	/* A finite ssthresh: the stream is never "in initial slow start". */
	tp->snd_ssthresh = 2;
}

static inline u32 saw_core_ssthresh(struct sock *sk)
{
	return 2;
}

/* Eq. (2): on an ACK with an RTT sample gamma, T = beta*gamma + (1-beta)*T. */
static inline void saw_core_pkts_acked(struct sock *sk, const struct ack_sample *sample,
				       u32 beta_pct, u32 extra_us)
{
	struct saw_ca *ca = inet_csk_ca(sk);

	if (sample->rtt_us > 0) {
		u64 t = (u64)beta_pct * (u32)sample->rtt_us + (u64)(100 - beta_pct) * ca->rto_us;

		ca->rto_us = (u32)min_t(u64, div_u64(t, 100), SAW_RTO_MAX_US);
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
static inline void saw_core_set_state(struct sock *sk, u8 new_state, u32 alpha_pct, u32 extra_us)
{
	struct inet_connection_sock *icsk = inet_csk(sk);
	struct saw_ca *ca = inet_csk_ca(sk);
	u32 j;

	if (new_state != TCP_CA_Loss || !icsk->icsk_ca_initialized)
		return;
	tcp_snd_cwnd_set(tcp_sk(sk), 1);
	ca->rto_us = (u32)min_t(u64, div_u64((u64)ca->rto_us * alpha_pct, 100), SAW_RTO_MAX_US);
	j = saw_rto_jiffies(sk, ca->rto_us, extra_us);
	icsk->icsk_rto = max_t(u32, DIV_ROUND_UP(j, 2), 1);
}

static inline u32 saw_core_undo_cwnd(struct sock *sk)
{
	return 1;
}

#endif /* TCP_SAW_CORE_H */
