-- SPDX-License-Identifier: (MIT OR GPL-2.0)
-- Wireshark / tshark dissector for the obsburst burst control packet
-- (struct obsb_ctrl_hdr in kernel/obsburst.h; docs/obs.md, "The control packet"):
-- an Ethernet frame with EtherType 0x88B5, a 48-byte big-endian payload.
--
--   tshark -X lua_script:testbed/optical/obsburst.lua -r capture.pcap -Y obsb
--   wireshark -X lua_script:testbed/optical/obsburst.lua capture.pcap
--
-- Fields: obsb.magic, obsb.version, obsb.class, obsb.flags, obsb.volume,
-- obsb.burst_id, obsb.bytes, obsb.packets, obsb.reserved, obsb.offset_ns, obsb.close_ns.

local obsb = Proto("obsb", "OBS burst control packet")
local f = obsb.fields
f.magic = ProtoField.uint32("obsb.magic", "Magic", base.HEX)
f.version = ProtoField.uint8("obsb.version", "Version", base.DEC)
f.class = ProtoField.uint8("obsb.class", "Class", base.DEC)
f.flags = ProtoField.uint16("obsb.flags", "Flags", base.HEX)
f.volume = ProtoField.bool("obsb.volume", "Closed by volume (Lmax; else by Tmax)", 16, nil, 0x0001)
f.burst_id = ProtoField.uint64("obsb.burst_id", "Burst id", base.DEC)
f.bytes = ProtoField.uint64("obsb.bytes", "Burst length (bytes)", base.DEC)
f.packets = ProtoField.uint32("obsb.packets", "Burst length (packets)", base.DEC)
f.reserved = ProtoField.uint32("obsb.reserved", "Reserved", base.HEX)
f.offset_ns = ProtoField.uint64("obsb.offset_ns", "Offset to the burst's first packet (ns)", base.DEC)
f.close_ns = ProtoField.uint64("obsb.close_ns", "Close time (ns, emulation CLOCK_MONOTONIC)", base.DEC)

local MAGIC = 0x4F425342 -- "OBSB"
local SIZE = 48

function obsb.dissector(buf, pinfo, tree)
    if buf:len() < SIZE or buf(0, 4):uint() ~= MAGIC then
        return 0
    end
    pinfo.cols.protocol = "OBSB"
    local t = tree:add(obsb, buf(0, SIZE))
    t:add(f.magic, buf(0, 4))
    t:add(f.version, buf(4, 1))
    t:add(f.class, buf(5, 1))
    local ft = t:add(f.flags, buf(6, 2))
    ft:add(f.volume, buf(6, 2))
    t:add(f.burst_id, buf(8, 8))
    t:add(f.bytes, buf(16, 8))
    t:add(f.packets, buf(24, 4))
    t:add(f.reserved, buf(28, 4))
    t:add(f.offset_ns, buf(32, 8))
    t:add(f.close_ns, buf(40, 8))
    local volume = buf(6, 2):uint() % 2 == 1
    pinfo.cols.info = string.format("burst %s class %d: %d packets, %s bytes, offset %s ns, closed by %s",
        tostring(buf(8, 8):uint64()), buf(5, 1):uint(), buf(24, 4):uint(), tostring(buf(16, 8):uint64()),
        tostring(buf(32, 8):uint64()), volume and "volume" or "time")
    return SIZE
end

DissectorTable.get("ethertype"):add(0x88B5, obsb)
