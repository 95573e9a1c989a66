"""``struct tcp_info`` (``getsockopt(IPPROTO_TCP, TCP_INFO)``) decoded into a dict.

Offsets follow ``include/uapi/linux/tcp.h``; the kernel returns as many bytes as it
knows (Linux 6.1 fills 232), and fields beyond the returned length are left out. Only
the fields the flow records use are decoded. Units are the kernel's: times in
microseconds, cwnd and ssthresh in segments. ``data_segs_out`` counts every data
segment sent, retransmissions included; ``dsack_dups`` counts the segments the
receiver reported as duplicates with a DSACK (retransmissions whose original had
arrived). ``busy_time_us`` is the time the sender had data in flight, of which
``rwnd_limited_us`` it was held by the receiver's window and ``sndbuf_limited_us``
by its send buffer (E4 checks with them that the buffer is the limit);
``reord_seen`` counts the sender's reordering detections and ``rcv_ooopack`` the
out-of-order packets a receiver got.
"""

from __future__ import annotations

import socket
import struct

#: bytes requested from the kernel (up to and including tcpi_snd_wnd)
TCP_INFO_LEN = 232

# name -> (offset, struct format); see struct tcp_info in include/uapi/linux/tcp.h
_FIELDS: dict[str, tuple[int, str]] = {
    "state": (0, "B"),
    "ca_state": (1, "B"),
    "retransmits": (2, "B"),
    "backoff": (4, "B"),
    "rto_us": (8, "I"),
    "snd_mss": (16, "I"),
    "unacked": (24, "I"),
    "lost": (32, "I"),
    "retrans": (36, "I"),
    "pmtu": (60, "I"),
    "rtt_us": (68, "I"),
    "rttvar_us": (72, "I"),
    "snd_ssthresh": (76, "I"),
    "snd_cwnd": (80, "I"),
    "reordering": (88, "I"),
    "total_retrans": (100, "I"),
    "pacing_rate": (104, "Q"),
    "bytes_acked": (120, "Q"),
    "bytes_received": (128, "Q"),
    "segs_out": (136, "I"),
    "segs_in": (140, "I"),
    "min_rtt_us": (148, "I"),
    "data_segs_in": (152, "I"),
    "data_segs_out": (156, "I"),
    "delivery_rate": (160, "Q"),
    "busy_time_us": (168, "Q"),
    "rwnd_limited_us": (176, "Q"),
    "sndbuf_limited_us": (184, "Q"),
    "bytes_sent": (200, "Q"),
    "bytes_retrans": (208, "Q"),
    "dsack_dups": (216, "I"),
    "reord_seen": (220, "I"),
    "rcv_ooopack": (224, "I"),
    "snd_wnd": (228, "I"),
}


def decode(raw: bytes) -> dict[str, int]:
    """Fields of a raw ``struct tcp_info`` (native byte order) present in ``raw``."""
    out = {}
    for name, (off, fmt) in _FIELDS.items():
        if off + struct.calcsize(fmt) <= len(raw):
            out[name] = struct.unpack_from("=" + fmt, raw, off)[0]
    return out


def read(sock: socket.socket) -> dict[str, int]:
    """``TCP_INFO`` of a connected TCP socket; an empty dict if the kernel refuses."""
    try:
        return decode(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN))
    except OSError:
        return {}
