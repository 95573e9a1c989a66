"""Read the BTF of a compiled BPF object: struct layouts, array lengths, enums, maps.

A small reader of the ``.BTF`` section of an ELF object (stdlib only, no bpftool or
libbpf), enough to check that a Python layout packs and parses the bytes the BPF
program sees: struct sizes, member names and byte offsets, array lengths, enum values,
map definitions (``.maps``) and ``const volatile`` variables (``.rodata``).
Format: the kernel's Documentation/bpf/btf.rst ("BTF Type and String Encoding").

Typical use::

    info = Btf.from_elf(Path("ebpf/portstat.bpf.o"))
    info.size("portstat_value")                      # 32
    info.decode("portstat_value", raw)["packets"]    # by member name
    info.maps()["port_counters"].value_size           # 32

Only little-endian 64-bit ELF objects are read (``clang -target bpf`` on x86).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from testbed.errors import TestbedError

BTF_MAGIC = 0xEB9F

#: BTF kind numbers (include/uapi/linux/btf.h) -> names.
KINDS = {
    1: "INT", 2: "PTR", 3: "ARRAY", 4: "STRUCT", 5: "UNION", 6: "ENUM", 7: "FWD",
    8: "TYPEDEF", 9: "VOLATILE", 10: "CONST", 11: "RESTRICT", 12: "FUNC",
    13: "FUNC_PROTO", 14: "VAR", 15: "DATASEC", 16: "FLOAT", 17: "DECL_TAG",
    18: "TYPE_TAG", 19: "ENUM64",
}
#: Kinds that only qualify or rename the type they point to.
_QUALIFIERS = {"TYPEDEF", "VOLATILE", "CONST", "RESTRICT", "TYPE_TAG"}
_INT_SIGNED = 1
_POINTER_SIZE = 8  # BPF is a 64-bit target


class BtfError(TestbedError):
    """The file has no readable BTF, or a named type, member or map is not in it."""


@dataclass(frozen=True)
class Member:
    """One member of a STRUCT or UNION: its name ('' if anonymous), type id and
    offset in bits; ``bitfield_size`` is the width in bits of a bitfield, else 0."""

    name: str
    type_id: int
    bit_offset: int
    bitfield_size: int = 0

    @property
    def offset(self) -> int:
        """Byte offset within the enclosing struct (floor for a bitfield)."""
        return self.bit_offset // 8


@dataclass(frozen=True)
class Type:
    """One BTF type. ``size`` is set for INT, STRUCT, UNION, ENUM, ENUM64, FLOAT and
    DATASEC; ``ref`` is the type pointed to (PTR, TYPEDEF, qualifiers, VAR, FUNC) or the
    element type (ARRAY) or the return type (FUNC_PROTO)."""

    id: int
    kind: str
    name: str
    size: int | None = None
    ref: int = 0
    nelems: int = 0                                 # ARRAY
    members: tuple[Member, ...] = ()                # STRUCT, UNION
    values: tuple[tuple[str, int], ...] = ()        # ENUM, ENUM64
    vars: tuple[tuple[int, int, int], ...] = ()     # DATASEC: (var type id, offset, size)
    params: tuple[tuple[str, int], ...] = ()        # FUNC_PROTO: (name, type id)
    int_bits: int = 0                               # INT: nr_bits
    int_signed: bool = False                        # INT
    kind_flag: bool = False


@dataclass(frozen=True)
class Field:
    """A scalar leaf of a flattened type: its path (``port[3].cut``), byte offset, size
    in bytes and whether it is signed. Bitfields are not leaves (see :meth:`Btf.fields`)."""

    path: str
    offset: int
    size: int
    signed: bool = False


@dataclass(frozen=True)
class MapDef:
    """A map of the object's ``.maps`` section (libbpf's BTF-defined map syntax)."""

    name: str
    type: int
    max_entries: int
    key_size: int
    value_size: int
    key_type: str = ""     # resolved type name of the key ('' if given by size only)
    value_type: str = ""


@dataclass
class Btf:
    """The types of one BTF blob, indexed by id (id 0 is ``void``)."""

    types: list[Type | None] = field(default_factory=list)
    _by_name: dict[str, list[Type]] = field(default_factory=dict, repr=False)

    # ---- reading --------------------------------------------------------------------

    @classmethod
    def from_elf(cls, path: Path | str) -> "Btf":
        """Read the ``.BTF`` section of the ELF object at ``path``.

        Raises BtfError if the file is not a little-endian 64-bit ELF, has no ``.BTF``
        section (built without ``-g``?) or the section is malformed; OSError if the file
        cannot be read.
        """
        data = Path(path).read_bytes()
        try:
            return cls.from_bytes(elf_section(data, ".BTF"))
        except BtfError as e:
            raise BtfError(f"{path}: {e}") from None

    @classmethod
    def from_bytes(cls, raw: bytes) -> "Btf":
        """Parse a raw BTF blob (header, type section, string section).

        Raises BtfError for a bad magic number, version or a truncated section.
        """
        try:
            return cls._parse(raw)
        except struct.error as e:
            raise BtfError(f"BTF is truncated or malformed ({e})") from None

    @classmethod
    def _parse(cls, raw: bytes) -> "Btf":
        types_at, type_len, strings = _sections(raw)

        def name(off: int) -> str:
            end = strings.index(b"\0", off)
            return strings[off:end].decode()

        out = cls(types=[None])
        pos, end = types_at, types_at + type_len
        while pos < end:
            name_off, info, size_or_type = struct.unpack_from("<III", raw, pos)
            pos += 12
            kind_no, vlen, kflag = (info >> 24) & 0x1F, info & 0xFFFF, bool(info >> 31)
            kind = KINDS.get(kind_no)
            if kind is None:
                raise BtfError(f"type {len(out.types)}: unknown BTF kind {kind_no}")
            tid, tname = len(out.types), name(name_off)
            t: Type
            if kind == "INT":
                (enc,) = struct.unpack_from("<I", raw, pos)
                pos += 4
                t = Type(tid, kind, tname, size=size_or_type, int_bits=enc & 0xFF,
                         int_signed=bool((enc >> 24) & _INT_SIGNED))
            elif kind == "ARRAY":
                elem, _index, nelems = struct.unpack_from("<III", raw, pos)
                pos += 12
                t = Type(tid, kind, tname, ref=elem, nelems=nelems)
            elif kind in ("STRUCT", "UNION"):
                members = []
                for _ in range(vlen):
                    m_name, m_type, m_off = struct.unpack_from("<III", raw, pos)
                    pos += 12
                    bits, width = (m_off & 0xFFFFFF, m_off >> 24) if kflag else (m_off, 0)
                    members.append(Member(name(m_name), m_type, bits, width))
                t = Type(tid, kind, tname, size=size_or_type, members=tuple(members), kind_flag=kflag)
            elif kind == "ENUM":
                vals = []
                for _ in range(vlen):
                    v_name, v = struct.unpack_from("<Ii" if kflag else "<II", raw, pos)
                    pos += 8
                    vals.append((name(v_name), v))
                t = Type(tid, kind, tname, size=size_or_type, values=tuple(vals), kind_flag=kflag)
            elif kind == "ENUM64":
                vals = []
                for _ in range(vlen):
                    v_name, lo, hi = struct.unpack_from("<III", raw, pos)
                    pos += 12
                    v = lo | (hi << 32)
                    if kflag and v >> 63:
                        v -= 1 << 64
                    vals.append((name(v_name), v))
                t = Type(tid, kind, tname, size=size_or_type, values=tuple(vals), kind_flag=kflag)
            elif kind == "FUNC_PROTO":
                params = []
                for _ in range(vlen):
                    p_name, p_type = struct.unpack_from("<II", raw, pos)
                    pos += 8
                    params.append((name(p_name), p_type))
                t = Type(tid, kind, tname, ref=size_or_type, params=tuple(params))
            elif kind == "VAR":
                pos += 4  # linkage
                t = Type(tid, kind, tname, ref=size_or_type)
            elif kind == "DATASEC":
                secvars = []
                for _ in range(vlen):
                    secvars.append(struct.unpack_from("<III", raw, pos))
                    pos += 12
                t = Type(tid, kind, tname, size=size_or_type, vars=tuple(secvars))
            elif kind == "DECL_TAG":
                pos += 4  # component_idx
                t = Type(tid, kind, tname, ref=size_or_type)
            elif kind in ("FLOAT",):
                t = Type(tid, kind, tname, size=size_or_type)
            else:  # PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, TYPE_TAG
                t = Type(tid, kind, tname, ref=size_or_type, kind_flag=kflag)
            out.types.append(t)
            if tname:
                out._by_name.setdefault(tname, []).append(t)
        if pos != end:
            raise BtfError("the type section does not end on a type boundary")
        return out

    # ---- looking up -------------------------------------------------------------------

    def type(self, type_id: int) -> Type:
        """The type with id ``type_id``; raises BtfError for void (0) or an unknown id."""
        if not 0 < type_id < len(self.types):
            raise BtfError(f"no type with id {type_id} (ids 1..{len(self.types) - 1})")
        t = self.types[type_id]
        assert t is not None
        return t

    def find(self, name: str, kind: str | None = None) -> Type:
        """The type named ``name`` (of ``kind`` if given; STRUCT, UNION, ENUM, TYPEDEF...).

        Raises BtfError if there is none, naming the kinds that do carry the name.
        """
        found = [t for t in self._by_name.get(name, []) if kind is None or t.kind == kind]
        if not found:
            have = sorted({t.kind for t in self._by_name.get(name, [])})
            raise BtfError(f"no {kind or 'type'} named {name!r} in the BTF"
                           + (f" (there is a {'/'.join(have)} of that name)" if have else ""))
        return found[0]

    def _named(self, what: int | str) -> Type:
        if isinstance(what, int):
            return self.type(what)
        for kind in ("STRUCT", "UNION", "ENUM", "ENUM64", "TYPEDEF", "INT"):
            if any(t.kind == kind for t in self._by_name.get(what, [])):
                return self.find(what, kind)
        return self.find(what)

    def resolve(self, what: int | str) -> Type:
        """The type behind typedefs and qualifiers (const, volatile, restrict, type tags)."""
        t = self._named(what)
        while t.kind in _QUALIFIERS:
            t = self.type(t.ref)
        return t

    def size(self, what: int | str) -> int:
        """Size in bytes of a type (by id or name). Raises BtfError for sizeless kinds
        (void, FUNC, FWD)."""
        t = self.resolve(what)
        if t.kind == "PTR":
            return _POINTER_SIZE
        if t.kind == "ARRAY":
            return t.nelems * self.size(t.ref)
        if t.kind == "VAR":
            return self.size(t.ref)
        if t.size is None:
            raise BtfError(f"type {t.id} ({t.kind} {t.name!r}) has no size")
        return t.size

    def members(self, what: int | str) -> tuple[Member, ...]:
        """Members of a STRUCT or UNION (in declaration order); BtfError for other kinds."""
        t = self.resolve(what)
        if t.kind not in ("STRUCT", "UNION"):
            raise BtfError(f"{t.kind} {t.name!r} is not a struct or union")
        return t.members

    def member(self, what: int | str, name: str) -> Member:
        """The member ``name`` of a struct; BtfError naming the members if absent."""
        for m in self.members(what):
            if m.name == name:
                return m
        names = ", ".join(m.name or "(anon)" for m in self.members(what))
        raise BtfError(f"{self.resolve(what).name!r} has no member {name!r} (members: {names})")

    def array_len(self, what: int | str, member: str) -> int:
        """Number of elements of the array member ``member`` of a struct."""
        t = self.resolve(self.member(what, member).type_id)
        if t.kind != "ARRAY":
            raise BtfError(f"member {member!r} is a {t.kind}, not an array")
        return t.nelems

    def enum(self, name: str) -> dict[str, int]:
        """Values of an enum, by enumerator name."""
        t = self.resolve(name)
        if t.kind not in ("ENUM", "ENUM64"):
            raise BtfError(f"{name!r} is a {t.kind}, not an enum")
        return dict(t.values)

    def type_name(self, what: int | str) -> str:
        """Readable name of a type: ``struct x``, ``__u32`` (typedefs kept), ``u8[4]``..."""
        t = self._named(what)
        while t.kind in ("VOLATILE", "CONST", "RESTRICT", "TYPE_TAG"):
            t = self.type(t.ref)
        if t.kind in ("STRUCT", "UNION", "ENUM"):
            return f"{t.kind.lower()} {t.name or '(anon)'}"
        if t.kind == "ARRAY":
            return f"{self.type_name(t.ref)}[{t.nelems}]"
        if t.kind == "PTR":
            return f"{self.type_name(t.ref) if t.ref else 'void'} *"
        return t.name

    # ---- flattening, encoding, decoding ------------------------------------------------

    def fields(self, what: int | str) -> list[Field]:
        """Every scalar leaf of a type, in offset order: ints, enums, pointers and floats,
        with arrays and nested structs expanded (``port[3].cut``, ``lock.val``).

        Raises BtfError for a bitfield member (no byte-addressable leaf).
        """
        out: list[Field] = []
        self._flatten(self._named(what).id, "", 0, out)
        return out

    def _flatten(self, type_id: int, path: str, base: int, out: list[Field]) -> None:
        t = self.resolve(type_id)
        if t.kind in ("STRUCT", "UNION"):
            for m in t.members:
                if m.bitfield_size or m.bit_offset % 8:
                    raise BtfError(f"{path or t.name}.{m.name} is a bitfield: not supported")
                sub = f"{path}.{m.name}" if path and m.name else (m.name or path)
                self._flatten(m.type_id, sub, base + m.offset, out)
        elif t.kind == "ARRAY":
            step = self.size(t.ref)
            for i in range(t.nelems):
                self._flatten(t.ref, f"{path}[{i}]", base + i * step, out)
        elif t.kind in ("INT", "ENUM", "ENUM64", "PTR", "FLOAT"):
            signed = t.int_signed if t.kind == "INT" else (t.kind_flag and t.kind != "PTR")
            out.append(Field(path, base, self.size(t.id), signed))
        else:
            raise BtfError(f"{path}: cannot flatten a {t.kind}")

    def decode(self, what: int | str, data: bytes) -> dict[str, int]:
        """Every leaf of ``data`` read as the type ``what``: {path: integer}.

        Raises BtfError if ``data`` is not exactly the size of the type.
        """
        size = self.size(what)
        if len(data) != size:
            raise BtfError(f"{self.type_name(what)} is {size} bytes, got {len(data)}")
        return {f.path: int.from_bytes(data[f.offset:f.offset + f.size], "little", signed=f.signed)
                for f in self.fields(what)}

    def encode(self, what: int | str, values: dict[str, int]) -> bytes:
        """Bytes of the type ``what`` with the leaves in ``values`` set, all else zero.

        Raises BtfError naming a path that is not a leaf, or a value that does not fit.
        """
        buf = bytearray(self.size(what))
        leaves = {f.path: f for f in self.fields(what)}
        for path, v in values.items():
            f = leaves.get(path)
            if f is None:
                raise BtfError(f"{self.type_name(what)} has no scalar member {path!r}")
            try:
                buf[f.offset:f.offset + f.size] = int(v).to_bytes(f.size, "little", signed=f.signed)
            except OverflowError:
                raise BtfError(f"{path} = {v} does not fit {f.size} bytes") from None
        return bytes(buf)

    # ---- object sections ----------------------------------------------------------------

    def datasec(self, name: str) -> dict[str, Type]:
        """Variables of a data section (``.maps``, ``.rodata``...): {name: VAR type}.
        An absent section gives {}."""
        try:
            sec = self.find(name, "DATASEC")
        except BtfError:
            return {}
        return {self.type(tid).name: self.type(tid) for tid, _off, _size in sec.vars}

    def rodata(self) -> dict[str, int]:
        """``const volatile`` variables of ``.rodata`` (set before load): {name: bytes}."""
        return {name: self.size(var.ref) for name, var in self.datasec(".rodata").items()}

    def maps(self) -> dict[str, MapDef]:
        """Maps declared in ``.maps`` (``__uint(type, ...)``, ``__type(key, ...)``,
        ``__uint(key_size, ...)``...): {name: MapDef}."""
        out = {}
        for name, var in self.datasec(".maps").items():
            spec: dict[str, int] = {}
            types: dict[str, int] = {}
            for m in self.members(var.ref):
                ptr = self.resolve(m.type_id)
                if ptr.kind != "PTR":
                    raise BtfError(f"map {name}: member {m.name} is not a pointer")
                target = self.resolve(ptr.ref)
                if m.name in ("key", "value"):
                    types[m.name] = ptr.ref
                elif target.kind == "ARRAY":  # __uint(name, N) is `int (*name)[N]`
                    spec[m.name] = target.nelems
            key_size = self.size(types["key"]) if "key" in types else spec.get("key_size", 0)
            value_size = self.size(types["value"]) if "value" in types else spec.get("value_size", 0)
            out[name] = MapDef(name, spec.get("type", 0), spec.get("max_entries", 0), key_size,
                               value_size, self.type_name(types["key"]) if "key" in types else "",
                               self.type_name(types["value"]) if "value" in types else "")
        return out


def _sections(raw: bytes) -> tuple[int, int, bytes]:
    """Where the type section of the raw BTF blob ``raw`` starts and its length, and
    the string section. Raises BtfError for a bad magic number or version or sections
    past the blob's end; struct.error when the header itself is truncated."""
    magic, version, _flags, hdr_len = struct.unpack_from("<HBBI", raw, 0)
    if magic != BTF_MAGIC:
        raise BtfError(f"BTF magic {magic:#x}, expected {BTF_MAGIC:#x} (big-endian object?)")
    if version != 1:
        raise BtfError(f"BTF version {version}, this reader knows version 1")
    type_off, type_len, str_off, str_len = struct.unpack_from("<IIII", raw, 8)
    types_at, strs_at = hdr_len + type_off, hdr_len + str_off
    if types_at + type_len > len(raw) or strs_at + str_len > len(raw):
        raise BtfError("BTF sections run past the end of the blob")
    return types_at, type_len, raw[strs_at:strs_at + str_len]


#: bytes that follow a type's 12-byte header, by kind number: (fixed, per vlen entry)
#: (Documentation/bpf/btf.rst; kinds not listed have none)
_TAIL = {1: (4, 0), 3: (12, 0), 4: (0, 12), 5: (0, 12), 6: (0, 8), 13: (0, 8), 14: (4, 0),
         15: (0, 12), 17: (4, 0), 19: (0, 12)}
_TYPE_HEADER = struct.Struct("<III")


def kinds_named(raw: bytes, name: str) -> list[str]:
    """The kinds ("STRUCT", "FWD", ...) of the types named ``name`` in the raw BTF blob
    ``raw`` (e.g. ``/sys/kernel/btf/vmlinux``), in type-id order; [] when there is none.

    Reads only the types' headers: the build host's 126 700 kernel types took 0.23 s
    per scan (beside two guests), where ``Btf.from_bytes`` builds every one (1.6 s of CPU).
    Raises BtfError for a bad magic number or version, and, when ``name`` is in the
    string section (else the types are not read), for an unknown kind or a type section
    that is truncated or does not end on a type boundary.
    """
    try:
        types_at, type_len, strings = _sections(raw)
    except struct.error as e:
        raise BtfError(f"BTF is truncated or malformed ({e})") from None
    want = name.encode() + b"\0"
    offsets = set()  # every offset whose string is ``name`` (a suffix of a longer string counts)
    at = strings.find(want)
    while at >= 0:
        offsets.add(at)
        at = strings.find(want, at + 1)
    found: list[str] = []
    if not offsets:
        return found
    pos, end = types_at, types_at + type_len
    unpack = _TYPE_HEADER.unpack_from
    try:
        while pos < end:
            name_off, info, _ = unpack(raw, pos)
            kind_no = (info >> 24) & 0x1F
            if kind_no not in KINDS:
                raise BtfError(f"type at byte {pos - types_at} of the type section: unknown BTF kind {kind_no}")
            if name_off in offsets:
                found.append(KINDS[kind_no])
            fixed, per = _TAIL.get(kind_no, (0, 0))
            pos += 12 + fixed + per * (info & 0xFFFF)
    except struct.error as e:
        raise BtfError(f"BTF type section is truncated ({e})") from None
    if pos != end:
        raise BtfError("the type section does not end on a type boundary")
    return found


def elf_section(data: bytes, name: str) -> bytes:
    """Contents of the section ``name`` of a little-endian 64-bit ELF image.

    Raises BtfError if ``data`` is not such an ELF image or has no section ``name``.
    """
    if data[:4] != b"\x7fELF":
        raise BtfError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise BtfError("only little-endian 64-bit ELF objects are read")
    try:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

        def header(i: int) -> tuple[int, int, int]:
            sh_name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
            return sh_name, offset, size

        _n, str_at, str_size = header(shstrndx)
        names = data[str_at:str_at + str_size]
        for i in range(shnum):
            sh_name, offset, size = header(i)
            if names[sh_name:names.index(b"\0", sh_name)].decode() == name:
                return data[offset:offset + size]
    except (struct.error, ValueError) as e:
        raise BtfError(f"malformed ELF section table ({e})") from None
    raise BtfError(f"no {name} section (was it compiled with -g?)")
