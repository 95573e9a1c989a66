-- SPDX-License-Identifier: (MIT OR GPL-2.0)
-- Wireshark / tshark dissector for E5's XCP probe (testbed/xcpprobe.py, LAYOUT;
-- docs/xcp-edge.md, "The probe header"): an Ethernet frame with EtherType 0x88B6,
-- a 64-byte big-endian header. Rates in paper bit/s, times in emulation ns.
--
--   tshark -X lua_script:testbed/optical/xcpprobe.lua -r capture.pcap -Y xcpp
--   wireshark -X lua_script:testbed/optical/xcpprobe.lua capture.pcap
--
-- Fields: xcpp.magic, xcpp.version, xcpp.flags, xcpp.returning, xcpp.ack, xcpp.hops,
-- xcpp.reserved, xcpp.src_edge, xcpp.dst_edge, xcpp.seq, xcpp.rate_bps,
-- xcpp.measured_bps, xcpp.feedback_bps, xcpp.send_ns, xcpp.arrive_ns,
-- xcpp.limiter_node, xcpp.limiter_port, xcpp.reserved2, xcpp.reserved3.

local xcpp = Proto("xcpp", "E5 XCP probe")
local f = xcpp.fields
f.magic = ProtoField.uint32("xcpp.magic", "Magic", base.HEX)
f.version = ProtoField.uint8("xcpp.version", "Version", base.DEC)
f.flags = ProtoField.uint8("xcpp.flags", "Flags", base.HEX)
f.returning = ProtoField.bool("xcpp.returning", "Returning (forwarded, not lowered)", 8, nil, 0x01)
f.ack = ProtoField.bool("xcpp.ack", "ACK macroflow", 8, nil, 0x02)
f.hops = ProtoField.uint8("xcpp.hops", "Links processed", base.DEC)
f.reserved = ProtoField.uint8("xcpp.reserved", "Reserved", base.HEX)
f.src_edge = ProtoField.uint16("xcpp.src_edge", "Ingress edge", base.DEC)
f.dst_edge = ProtoField.uint16("xcpp.dst_edge", "Egress edge", base.DEC)
f.seq = ProtoField.uint32("xcpp.seq", "Probe number", base.DEC)
f.rate_bps = ProtoField.uint64("xcpp.rate_bps", "Granted rate R (paper bit/s)", base.DEC)
f.measured_bps = ProtoField.uint64("xcpp.measured_bps", "Measured rate u_i (paper bit/s)", base.DEC)
f.feedback_bps = ProtoField.int64("xcpp.feedback_bps", "Feedback (paper bit/s)", base.DEC)
f.send_ns = ProtoField.uint64("xcpp.send_ns", "Intended emission at the ingress edge (emulation ns)", base.DEC)
f.arrive_ns = ProtoField.uint64("xcpp.arrive_ns", "Intended arrival at this agent (emulation ns)", base.DEC)
f.limiter_node = ProtoField.uint16("xcpp.limiter_node", "Node that set the feedback (65535: none)", base.DEC)
f.limiter_port = ProtoField.uint8("xcpp.limiter_port", "Its output port (255: none)", base.DEC)
f.reserved2 = ProtoField.uint8("xcpp.reserved2", "Reserved", base.HEX)
f.reserved3 = ProtoField.uint32("xcpp.reserved3", "Reserved", base.HEX)

local MAGIC = 0x58435050 -- "XCPP"
local SIZE = 64

function xcpp.dissector(buf, pinfo, tree)
    if buf:len() < SIZE or buf(0, 4):uint() ~= MAGIC then
        return 0
    end
    pinfo.cols.protocol = "XCPP"
    local t = tree:add(xcpp, buf(0, SIZE))
    t:add(f.magic, buf(0, 4))
    t:add(f.version, buf(4, 1))
    local ft = t:add(f.flags, buf(5, 1))
    ft:add(f.returning, buf(5, 1))
    ft:add(f.ack, buf(5, 1))
    t:add(f.hops, buf(6, 1))
    t:add(f.reserved, buf(7, 1))
    t:add(f.src_edge, buf(8, 2))
    t:add(f.dst_edge, buf(10, 2))
    t:add(f.seq, buf(12, 4))
    t:add(f.rate_bps, buf(16, 8))
    t:add(f.measured_bps, buf(24, 8))
    t:add(f.feedback_bps, buf(32, 8))
    t:add(f.send_ns, buf(40, 8))
    t:add(f.arrive_ns, buf(48, 8))
    t:add(f.limiter_node, buf(56, 2))
    t:add(f.limiter_port, buf(58, 1))
    t:add(f.reserved2, buf(59, 1))
    t:add(f.reserved3, buf(60, 4))
    local flags = buf(5, 1):uint()
    pinfo.cols.info = string.format("%s%s probe %d->%d #%d: R %s, u %s, feedback %s bit/s, %d hops",
        flags % 2 == 1 and "returning " or "", math.floor(flags / 2) % 2 == 1 and "ACK" or "data",
        buf(8, 2):uint(), buf(10, 2):uint(), buf(12, 4):uint(), tostring(buf(16, 8):uint64()),
        tostring(buf(24, 8):uint64()), tostring(buf(32, 8):int64()), buf(6, 1):uint())
    return SIZE
end

DissectorTable.get("ethertype"):add(0x88B6, xcpp)
