// The viewer's reader of .jaxpr files: the container (header, checksums,
// data section), a protobuf wire decoder driven by schema.js (generated from
// the compiled schema), and the resolution of every table of `Program`
// (strings, avals, arrays, param sets, equation kinds, name stacks, jaxprs,
// closed jaxprs, pytrees). It is written from schema/jaxpr.proto alone and
// shares no code with the Python reader; tests/viewer/test_viewer.py holds it to the
// same golden files. Runs in browsers and in node (no dependencies).
(function (root) {
'use strict';
const SCHEMA = (typeof module !== 'undefined' && typeof require !== 'undefined')
  ? require('./schema.js') : JAXPR_SCHEMA;  // schema.js's global, in a page

class FormatError extends Error {
  constructor(message) { super(message); this.name = 'FormatError'; }
}

// The cost model of jaxpr_io/safety/costs.py, with the constants of
// jaxpr_io/format/limits.py (tests/hostile/test_costs.py checks that they
// match): what a file's pytrees expand to, every use of a shared node
// counted, is charged against 16x the file's size + 64 MiB before a tree
// is built, so that a small file cannot describe a tree that hangs the page.
const COSTS = {memoryFactor: 16, fixedOverhead: 64 * 1024 * 1024, treeNodeCost: 320};
const COUNT_CAP = Number.MAX_SAFE_INTEGER;

// ------------------------------------------------------------------ CRC-32
// ISO-HDLC (zlib's crc32), table driven.
const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = (c & 1) ? (0xEDB88320 ^ (c >>> 1)) : (c >>> 1);
    t[n] = c >>> 0;
  }
  return t;
})();

function crc32(bytes) {
  let c = 0xFFFFFFFF;
  for (let i = 0; i < bytes.length; i++) c = CRC_TABLE[(c ^ bytes[i]) & 0xFF] ^ (c >>> 8);
  return (c ^ 0xFFFFFFFF) >>> 0;
}

// --------------------------------------------------------------- container
const MAGIC = [0x89, 0x4A, 0x41, 0x58, 0x50, 0x52, 0x0D, 0x0A];
const HEADER_SIZE = 64;

function u64(view, offset) {
  const v = view.getBigUint64(offset, true);
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new FormatError(`header field at byte ${offset} is too large`);
  return Number(v);
}

// Checks the header as schema/jaxpr.proto's "Container" specifies; returns
// the format version, the program bytes and the data section.
function readContainer(bytes) {
  if (!(bytes instanceof Uint8Array)) bytes = new Uint8Array(bytes);
  if (bytes.length < HEADER_SIZE) throw new FormatError(`the file has ${bytes.length} bytes, fewer than the 64-byte header`);
  for (let i = 0; i < 8; i++) {
    if (bytes[i] !== MAGIC[i]) throw new FormatError('not a jaxpr_io file (bad magic at bytes 0-7)');
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (crc32(bytes.subarray(0, 60)) !== view.getUint32(60, true)) throw new FormatError('header checksum mismatch (bytes 0-59)');
  const version = view.getUint32(8, true);
  if (version > SCHEMA.format_version) throw new FormatError(`written in format version ${version}; this viewer reads versions ${SCHEMA.oldest_format_version} to ${SCHEMA.format_version}`);
  if (version < SCHEMA.oldest_format_version) throw new FormatError(`format version ${version} is older than the oldest readable one`);
  const headerSize = view.getUint32(12, true);
  for (let i = 52; i < 60; i++) if (bytes[i] !== 0) throw new FormatError('reserved header bytes (52-59) are not zero');
  if (headerSize !== HEADER_SIZE) throw new FormatError(`header size ${headerSize} is not 64`);
  const programOffset = u64(view, 16), programLength = u64(view, 24);
  const dataOffset = u64(view, 32), dataLength = u64(view, 40);
  if (programOffset !== HEADER_SIZE || dataOffset % 64 || dataOffset < programOffset + programLength ||
      dataOffset + dataLength !== bytes.length) {
    throw new FormatError(`part bounds are wrong (program ${programOffset}+${programLength}, data ${dataOffset}+${dataLength}, file ${bytes.length} bytes)`);
  }
  for (let i = programOffset + programLength; i < dataOffset; i++) {
    if (bytes[i] !== 0) throw new FormatError(`the padding before the data section (offset ${programOffset + programLength}) is not zero`);
  }
  const program = bytes.subarray(programOffset, programOffset + programLength);
  if (crc32(program) !== view.getUint32(48, true)) throw new FormatError(`program checksum mismatch (bytes ${programOffset}-${programOffset + programLength - 1})`);
  return {version, program, data: bytes.subarray(dataOffset, dataOffset + dataLength)};
}

// ---------------------------------------------------------- protobuf wire
const UTF8 = new TextDecoder('utf-8');
const TWO32 = 4294967296;

// A varint at pos: [value, next pos]. Values beyond 2**53 come as BigInt.
function varint(buf, pos) {
  let b = buf[pos++];
  if (b < 0x80) return [b, pos];
  let v = b & 0x7F, shift = 7;
  while (shift < 49) {
    if (pos >= buf.length) throw new FormatError('truncated varint');
    b = buf[pos++];
    v += (b & 0x7F) * Math.pow(2, shift);
    if (b < 0x80) return [v, pos];
    shift += 7;
  }
  // Wide: redo it exactly with BigInt.
  let big = BigInt(v), s = BigInt(shift);
  for (;;) {
    if (pos >= buf.length || shift > 70) throw new FormatError('bad varint');
    b = buf[pos++];
    big += BigInt(b & 0x7F) << s;
    if (b < 0x80) break;
    s += 7n; shift += 7;
  }
  big = BigInt.asUintN(64, big);
  return [big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big, pos];
}

function safe(big) {
  return (big >= -BigInt(Number.MAX_SAFE_INTEGER) && big <= BigInt(Number.MAX_SAFE_INTEGER)) ? Number(big) : big;
}

// A raw varint as the field's scalar type.
function scalar(type, v) {
  switch (type) {
    case 'bool': return v !== 0 && v !== 0n;
    case 'uint32': case 'enum':
      return typeof v === 'bigint' ? Number(BigInt.asUintN(32, v)) : (v % TWO32);
    case 'int32':
      return Number(BigInt.asIntN(32, BigInt(v)));
    case 'uint64': return v;
    case 'int64': return typeof v === 'bigint' ? safe(BigInt.asIntN(64, v)) : v;
    case 'sint32': case 'sint64': {
      const big = BigInt(v);
      return safe((big >> 1n) ^ -(big & 1n));
    }
    default: throw new FormatError(`type ${type} is not a varint`);
  }
}

const FIXED32 = {fixed32: (d, o) => d.getUint32(o, true), sfixed32: (d, o) => d.getInt32(o, true), float: (d, o) => d.getFloat32(o, true)};
const FIXED64 = {double: (d, o) => d.getFloat64(o, true), fixed64: (d, o) => safe(d.getBigUint64(o, true)), sfixed64: (d, o) => safe(d.getBigInt64(o, true))};

function defaults(type, spec) {
  const out = {};
  for (const number in spec) {
    const [name, wire, repeated, , oneof] = spec[number];
    if (repeated) out[name] = [];
    else if (oneof) continue;
    else if (wire === 'message') out[name] = null;
    else if (wire === 'string') out[name] = '';
    else if (wire === 'bytes') out[name] = new Uint8Array(0);
    else if (wire === 'bool') out[name] = false;
    else out[name] = 0;
  }
  return out;
}

// Decodes bytes as message `type`: a plain object with the fields' names.
// Repeated fields are arrays, absent messages null, absent scalars their
// proto3 default; a set oneof member `m` of oneof `o` sets out['$o'] = 'm'.
function decode(type, buf) {
  const spec = SCHEMA.messages[type];
  if (!spec) throw new Error(`unknown message ${type}`);
  const out = defaults(type, spec);
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let pos = 0;
  while (pos < buf.length) {
    let key;
    [key, pos] = varint(buf, pos);
    if (typeof key !== 'number') throw new FormatError(`${type}: bad field key`);
    const number = Math.floor(key / 8), wt = key & 7;
    const field = spec[number];
    let value, packed = null;
    if (wt === 0) {
      [value, pos] = varint(buf, pos);
    } else if (wt === 1) {
      if (pos + 8 > buf.length) throw new FormatError(`${type}: truncated field ${number}`);
      value = pos; pos += 8;
    } else if (wt === 5) {
      if (pos + 4 > buf.length) throw new FormatError(`${type}: truncated field ${number}`);
      value = pos; pos += 4;
    } else if (wt === 2) {
      let n;
      [n, pos] = varint(buf, pos);
      if (typeof n !== 'number' || pos + n > buf.length) throw new FormatError(`${type}: field ${number} runs past the message`);
      value = buf.subarray(pos, pos + n); pos += n;
    } else {
      throw new FormatError(`${type}: unsupported wire type ${wt} (field ${number})`);
    }
    if (!field) continue;  // unknown field: skipped, as protobuf does
    const [name, ftype, repeated, sub, oneof] = field;
    const items = [];
    if (wt === 2 && ftype !== 'string' && ftype !== 'bytes' && ftype !== 'message') {
      // Packed repeated scalars.
      packed = value;
      const pview = new DataView(packed.buffer, packed.byteOffset, packed.byteLength);
      let p = 0;
      while (p < packed.length) {
        if (FIXED32[ftype]) { items.push(FIXED32[ftype](pview, p)); p += 4; }
        else if (FIXED64[ftype]) { items.push(FIXED64[ftype](pview, p)); p += 8; }
        else { let v; [v, p] = varint(packed, p); items.push(scalar(ftype, v)); }
      }
    } else if (ftype === 'message') {
      items.push(decode(sub, value));
    } else if (ftype === 'string') {
      items.push(UTF8.decode(value));
    } else if (ftype === 'bytes') {
      items.push(value);
    } else if (wt === 5) {
      items.push(FIXED32[ftype](view, value));
    } else if (wt === 1) {
      items.push(FIXED64[ftype](view, value));
    } else {
      items.push(scalar(ftype, value));
    }
    if (repeated) {
      for (const it of items) out[name].push(it);
    } else {
      const v = items[items.length - 1];
      if (ftype === 'message' && out[name]) merge(out[name], v);
      else out[name] = v;
      if (oneof) {
        const prev = out['$' + oneof];
        if (prev && prev !== name) delete out[prev];
        out['$' + oneof] = name;
      }
    }
  }
  return out;
}

function merge(a, b) {  // protobuf's merge of a repeated singular message
  for (const k in b) {
    if (Array.isArray(b[k])) a[k] = a[k].concat(b[k]);
    else if (b[k] && typeof b[k] === 'object' && !(b[k] instanceof Uint8Array) && a[k]) merge(a[k], b[k]);
    else a[k] = b[k];
  }
}

// ------------------------------------------------------------------ dtypes
const DTYPE_NUMBERS = SCHEMA.enums.DType;
const DTYPE_NAME = {};
for (const name in DTYPE_NUMBERS) DTYPE_NAME[DTYPE_NUMBERS[name]] = name.toLowerCase();
// Bytes per element in the data section (sub-byte types take one byte).
const ITEMSIZE = {bool: 1, int8: 1, int16: 2, int32: 4, int64: 8, uint8: 1, uint16: 2, uint32: 4, uint64: 8,
  float16: 2, bfloat16: 2, float32: 4, float64: 8, complex64: 8, complex128: 16, float0: 0, prng_key: 4};
const SHORT = {bool: 'bool', int8: 'i8', int16: 'i16', int32: 'i32', int64: 'i64', uint8: 'u8', uint16: 'u16',
  uint32: 'u32', uint64: 'u64', float16: 'f16', bfloat16: 'bf16', float32: 'f32', float64: 'f64',
  complex64: 'c64', complex128: 'c128', int4: 'i4', uint4: 'u4', int2: 'i2', uint2: 'u2', int1: 'i1', uint1: 'u1'};
// Minifloats: [exponent bits, mantissa bits, bias, special values]:
// 'ieee': the top exponent is inf/NaN; 'fn': only all-ones is NaN;
// 'fnuz': 0x80 is NaN (no -0); 'finite': no inf or NaN; 'e8m0': exponent only.
const MINIFLOAT = {
  float8_e4m3fn: [4, 3, 7, 'fn'], float8_e4m3fnuz: [4, 3, 8, 'fnuz'], float8_e4m3b11fnuz: [4, 3, 11, 'fnuz'],
  float8_e5m2: [5, 2, 15, 'ieee'], float8_e5m2fnuz: [5, 2, 16, 'fnuz'], float8_e4m3: [4, 3, 7, 'ieee'],
  float8_e3m4: [3, 4, 3, 'ieee'], float8_e8m0fnu: [8, 0, 127, 'e8m0'], float4_e2m1fn: [2, 1, 1, 'finite'],
  float6_e2m3fn: [2, 3, 1, 'finite'], float6_e3m2fn: [3, 2, 3, 'finite'],
};
const SUBBYTE = {int4: [4, true], uint4: [4, false], int2: [2, true], uint2: [2, false], int1: [1, true], uint1: [1, false]};

function minifloat(bits, [e, m, bias, mode]) {
  if (mode === 'e8m0') return bits === 0xFF ? NaN : Math.pow(2, bits - bias);
  const sign = (bits >> (e + m)) & 1, exp = (bits >> m) & ((1 << e) - 1), man = bits & ((1 << m) - 1);
  const top = (1 << e) - 1;
  if (mode === 'fnuz' && bits === 0x80) return NaN;
  if (mode === 'ieee' && exp === top) return man ? NaN : (sign ? -Infinity : Infinity);
  if (mode === 'fn' && exp === top && man === (1 << m) - 1) return NaN;
  const v = exp === 0 ? man / (1 << m) * Math.pow(2, 1 - bias) : (1 + man / (1 << m)) * Math.pow(2, exp - bias);
  return sign ? -v : v;
}

function half(bits) {  // IEEE float16
  const sign = bits & 0x8000 ? -1 : 1, exp = (bits >> 10) & 0x1F, man = bits & 0x3FF;
  if (exp === 0x1F) return man ? NaN : sign * Infinity;
  if (exp === 0) return sign * man * Math.pow(2, -24);
  return sign * (1 + man / 1024) * Math.pow(2, exp - 15);
}

function itemsize(dtype) {
  if (dtype in ITEMSIZE) return ITEMSIZE[dtype];
  if (dtype.startsWith('key<')) return 4;
  return 1;  // sub-byte integers and minifloats: one byte each
}

// Element i of raw little-endian bytes of `dtype` as a JS value: numbers,
// BigInt beyond 2**53, booleans, [re, im] for complex numbers.
function element(view, i, dtype) {
  const o = i * itemsize(dtype);
  switch (dtype) {
    case 'bool': return view.getUint8(o) !== 0;
    case 'int8': return view.getInt8(o);
    case 'int16': return view.getInt16(o, true);
    case 'int32': return view.getInt32(o, true);
    case 'int64': return safe(view.getBigInt64(o, true));
    case 'uint8': return view.getUint8(o);
    case 'uint16': return view.getUint16(o, true);
    case 'uint32': return view.getUint32(o, true);
    case 'uint64': return safe(view.getBigUint64(o, true));
    case 'float16': return half(view.getUint16(o, true));
    case 'bfloat16': {
      const f = new DataView(new ArrayBuffer(4));
      f.setUint32(0, view.getUint16(o, true) << 16, false);
      return f.getFloat32(0, false);
    }
    case 'float32': return view.getFloat32(o, true);
    case 'float64': return view.getFloat64(o, true);
    case 'complex64': return [view.getFloat32(o, true), view.getFloat32(o + 4, true)];
    case 'complex128': return [view.getFloat64(o, true), view.getFloat64(o + 8, true)];
  }
  if (dtype.startsWith('key<')) return view.getUint32(o, true);
  if (dtype in SUBBYTE) {
    const [bits, signed] = SUBBYTE[dtype];
    let v = view.getUint8(o) & ((1 << bits) - 1);
    if (signed && v >= (1 << (bits - 1))) v -= (1 << bits);
    return v;
  }
  if (dtype in MINIFLOAT) return minifloat(view.getUint8(o), MINIFLOAT[dtype]);
  throw new FormatError(`no element decoder for dtype ${dtype}`);
}

// --------------------------------------------------------------- program
const HOST_KIND = {};
for (const name in SCHEMA.enums.HostKind) HOST_KIND[SCHEMA.enums.HostKind[name]] = name;
const TREE_KIND = {};
for (const name in SCHEMA.enums['PyTree.Kind']) TREE_KIND[SCHEMA.enums['PyTree.Kind'][name]] = name;

function u32column(bytes, what) {
  if (bytes.length % 4) throw new FormatError(`column ${what} has ${bytes.length} bytes, not a multiple of 4`);
  const copy = bytes.slice();  // aligned
  return new Uint32Array(copy.buffer, 0, copy.length / 4);
}
function i32column(bytes, what) {
  const u = u32column(bytes, what);
  return new Int32Array(u.buffer, 0, u.length);
}

class Program {
  constructor(bytes) {
    const c = readContainer(bytes);
    this.formatVersion = c.version;
    this.data = c.data;
    this.msg = decode('Program', c.program);
    if (this.msg.format_version !== c.version) throw new FormatError(`the header says version ${c.version}, the program ${this.msg.format_version}`);
    this._avals = []; this._arrays = []; this._jaxprs = []; this._closed = []; this._blobOk = [];
    this._kinds = []; this._paramSets = []; this._stacks = null; this._trees = [];
    this.size = bytes.length;
    this._budget = COSTS.memoryFactor * bytes.length + COSTS.fixedOverhead;
    this._treeCounts = [];           // [nodes, leaves] of each tree_nodes entry
    this._charged = new WeakSet();   // PyTree messages charged already
    this._signatures = {};
    // The signatures are charged (and refused) here, before the page shows
    // anything of the file.
    this.inTree(); this.outTree();
  }

  // [nodes, leaves] of the tree of PyTree message `m`, every use of a shared
  // node counted: each tree_nodes entry is counted once, in table order, from
  // the entries before it (linear in the file). A reference that `tree`
  // refuses counts as one leaf here.
  treeCounts(m) {
    const table = this.msg.tree_nodes, memo = this._treeCounts;
    const entry = (i) => {
      while (memo.length <= i) memo.push(count(table[memo.length], memo.length));
      return memo[i];
    };
    const count = (top, limit) => {
      let nodes = 0, leaves = 0;
      const stack = [top];
      while (stack.length) {
        const n = stack.pop();
        if (n.shared) {
          const i = n.shared - 1;
          const [a, b] = i < limit ? entry(i) : [1, 1];
          nodes = Math.min(nodes + a, COUNT_CAP); leaves = Math.min(leaves + b, COUNT_CAP);
          continue;
        }
        nodes++;
        if (n.kind === 1) leaves++;  // LEAF
        for (const c of n.children) stack.push(c);
      }
      return [nodes, leaves];
    };
    return count(m, table.length);
  }

  // Charges the tree of `m` against the budget, once per message.
  chargeTree(m, what) {
    if (this._charged.has(m)) return;
    const [nodes] = this.treeCounts(m);
    this._budget -= nodes * COSTS.treeNodeCost;
    if (this._budget < 0) {
      throw new FormatError(`${what} is a pytree of ${nodes.toLocaleString('en-US')} nodes (counting every use ` +
        `of a shared node), more than a file of ${this.size.toLocaleString('en-US')} bytes may ask for ` +
        `(${COSTS.memoryFactor}x its size + ${COSTS.fixedOverhead / 1048576} MiB); the viewer does not show it`);
    }
    this._charged.add(m);
  }

  string(i) {
    const s = this.msg.strings;
    if (!(i >= 0 && i < s.length)) throw new FormatError(`string index ${i} is out of range (${s.length} strings)`);
    return s[i];
  }

  index(table, i, what) {
    if (!(i >= 0 && i < this.msg[table].length)) throw new FormatError(`${what} index ${i} is out of range (the table has ${this.msg[table].length} entries)`);
    return this.msg[table][i];
  }

  dtype(t) {
    const name = DTYPE_NAME[t.dtype];
    if (!name || t.dtype === 0) throw new FormatError(`unknown dtype number ${t.dtype}`);
    if (name === 'prng_key') return `key<${this.string(t.key_impl)}>`;
    if (name === 'extended') {  // version 5: a record naming the type
      if (!t.extended || t.extended.$kind !== 'record') throw new FormatError('an EXTENDED dtype without its record');
      return this.string(t.extended.record.type);
    }
    return name;
  }

  // An aval: {kind: 'array', dtype, shape: [int|string], weak} | {kind: 'token'} | {kind: 'ref', inner}
  // | {kind: 'future', inner, done} | {kind: 'lin_val', inner, memory}
  // | {kind: 'hi_mutable', type: 'box' | 'log'}.
  aval(i) {
    if (this._avals[i]) return this._avals[i];
    const m = this.index('avals', i, 'aval');
    let a;
    if (m.$kind === 'shaped_array') {
      const s = m.shaped_array;
      if (!s.dtype) throw new FormatError(`aval ${i} has no dtype`);
      if (s.sizes.length && s.shape.length) throw new FormatError(`aval ${i} has both sizes and shape`);
      a = {kind: 'array', dtype: this.dtype(s.dtype), weak: s.weak_type,
           shape: s.sizes.length ? s.sizes.slice()  // version 5: known sizes, packed
                  : s.shape.map(d => d.$kind === 'expr' ? this.string(d.expr) : d.size)};
      if (s.memory_space > 1) a.memory = s.memory_space === 2 ? 'host' : 'any';
      // Version 6: a memory space not JAX's own (a Pallas kernel's), a registered enum member.
      if (s.kernel_memory_space) a.memory_space = this.value(s.kernel_memory_space);
      if (s.sharding) a.sharding = this.value(s.sharding);
      // Version 7: JAX 0.12's layout (relayout), a Layout record.
      if (s.layout) a.layout = this.value(s.layout);
    } else if (m.$kind === 'token') {
      a = {kind: 'token'};
    } else if (m.$kind === 'ref') {
      if (m.ref.inner_aval >= i) throw new FormatError(`ref aval ${i} refers to a later aval`);
      a = {kind: 'ref', inner: this.aval(m.ref.inner_aval)};
      if (m.ref.memory_space) a.memory_space = this.value(m.ref.memory_space);
    } else if (m.$kind === 'future' || m.$kind === 'lin_val') {
      // Version 7: an async collective's future, a pinned linear value.
      const f = m[m.$kind];
      if (f.inner_aval >= i) throw new FormatError(`${m.$kind} aval ${i} refers to a later aval`);
      a = {kind: m.$kind, inner: this.aval(f.inner_aval)};
      if (m.$kind === 'future' && f.done) a.done = this.string(f.done - 1);
      if (m.$kind === 'lin_val' && f.memory_space) a.memory = f.memory_space === 1 ? 'hbm' : 'vmem';
    } else if (m.$kind === 'hi_mutable') {
      // Version 8: JAX 0.10's Box or Log. What a box holds (Jaxpr.qdds) is
      // not shown.
      const k = m.hi_mutable.kind;
      if (k !== 1 && k !== 2) throw new FormatError(`aval ${i} is of unknown mutable hijax type kind ${k}`);
      a = {kind: 'hi_mutable', type: k === 1 ? 'box' : 'log'};
    } else {
      throw new FormatError(`aval ${i} has no kind`);
    }
    return (this._avals[i] = a);
  }

  blob(i) {
    const b = this.index('blobs', i, 'blob');
    if (b.offset % 64 || b.offset + b.length > this.data.length) throw new FormatError(`blob ${i} lies outside the data section`);
    const bytes = this.data.subarray(b.offset, b.offset + b.length);
    if (!this._blobOk[i]) {  // checked before first use, once
      if (crc32(bytes) !== b.crc32) throw new FormatError(`blob ${i} checksum mismatch`);
      this._blobOk[i] = true;
    }
    return bytes;
  }

  // An array: {aval, kind, nbytes, bytes() | python}.
  array(i) {
    if (this._arrays[i]) return this._arrays[i];
    const m = this.index('arrays', i, 'array');
    const a = {index: i, aval: this.aval(m.aval), kind: HOST_KIND[m.kind] || String(m.kind)};
    if (m.$data === 'inline') { a.raw = m.inline; a.nbytes = m.inline.length; }
    else if (m.$data === 'blob') { a.blob = m.blob; a.nbytes = this.index('blobs', m.blob, 'blob').length; }
    else if (m.$data === 'python_value') { a.python = this.value(m.python_value); a.nbytes = null; }
    else a.raw = new Uint8Array(0), a.nbytes = 0;
    return (this._arrays[i] = a);
  }

  // The first n elements of array i (row-major).
  arrayValues(arr, n) {
    if (arr.python !== undefined) return [arr.python];
    const bytes = arr.raw || this.blob(arr.blob);
    const dtype = arr.aval.kind === 'array' ? arr.aval.dtype : 'uint8';
    const size = itemsize(dtype);
    if (size === 0) return [];
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const count = Math.min(n, Math.floor(bytes.length / size));
    const out = [];
    for (let k = 0; k < count; k++) out.push(element(view, k, dtype));
    return out;
  }

  // A Value message as a plain JS value (see `valueKinds` below).
  value(m) {
    const kind = m.$kind;
    switch (kind) {
      case 'none': return null;
      case 'bool': return m.bool;
      case 'int': return m.int;
      case 'big_int': return {big: m.big_int};
      case 'float': return m.float;
      case 'str': return this.string(m.str);
      case 'tuple': return m.tuple.items.map(v => this.value(v));
      case 'ints': return m.ints.items.slice();  // version 5: packed tuples
      case 'bools': return m.bools.items.slice();
      case 'dtype': return {dtype: this.dtype(m.dtype)};
      case 'enum': return {enum: this.string(m.enum.type), member: this.string(m.enum.member)};
      case 'record': return {record: this.string(m.record.type), fields: m.record.fields.map(v => this.value(v))};
      case 'jaxpr': this.index('jaxprs', m.jaxpr, 'jaxpr'); return {jaxpr: m.jaxpr};
      case 'closed_jaxpr': this.index('closed_jaxprs', m.closed_jaxpr, 'closed jaxpr'); return {closed_jaxpr: m.closed_jaxpr};
      case 'primitive': return {primitive: this.string(m.primitive)};
      case 'array': return {array: this.array(m.array)};
      case 'complex': return {complex: [m.complex.real, m.complex.imag]};
      case 'param_codec': return {codec: this.value(m.param_codec)};
      case 'type': return {type: m.type.$kind === 'numpy_scalar' ? {numpy: this.dtype(m.type.numpy_scalar)} : this.string(m.type.builtin)};
      case 'frozenset': return {frozenset: m.frozenset.items.map(v => this.value(v))};
      case 'dim_expr': return {dim: this.string(m.dim_expr)};
      case 'treedef': return {treedef: this.tree(m.treedef, 'a treedef value')};
      case 'aval': return {aval: this.aval(m.aval)};
    }
    throw new FormatError(`a Value without a kind`);
  }

  paramSet(i) {
    if (this._paramSets[i]) return this._paramSets[i];
    const m = this.index('param_sets', i, 'param set');
    return (this._paramSets[i] = m.params.map(p => [this.string(p.name), this.value(p.value)]));
  }

  kind(k) {
    if (this._kinds[k]) return this._kinds[k];
    const m = this.index('equation_kinds', k, 'equation kind');
    return (this._kinds[k] = {primitive: this.string(m.primitive), params: this.paramSet(m.param_set),
                              nIn: m.num_invars, nOut: m.num_outvars});
  }

  // Name stack i as text: scopes joined by '/', transforms as name().
  nameStack(i) {
    if (this.formatVersion < 3) {
      const m = this.index('name_stacks', i, 'name stack');
      return m.entries.map(e => e.kind === 2 ? `${this.string(e.name)}()` : this.string(e.name)).join('/');
    }
    if (!this._stacks) {
      const t = this.msg.name_stack_table || {parents: new Uint8Array(0), kinds: new Uint8Array(0), names: new Uint8Array(0)};
      const parents = u32column(t.parents, 'parents'), kinds = u32column(t.kinds, 'kinds'), names = u32column(t.names, 'names');
      if (kinds.length !== parents.length || names.length !== parents.length) throw new FormatError('name stack columns differ in length');
      const stacks = [];
      for (let s = 0; s < parents.length; s++) {
        if (parents[s] > s) throw new FormatError(`name stack ${s} has a later parent`);
        const head = parents[s] ? stacks[parents[s] - 1] : '';
        const own = kinds[s] === 0 ? '' : (kinds[s] === 2 ? `${this.string(names[s])}()` : this.string(names[s]));
        stacks.push(head && own ? `${head}/${own}` : head + own);
      }
      this._stacks = stacks;
    }
    if (!(i < this._stacks.length)) throw new FormatError(`name stack index ${i} is out of range`);
    return this._stacks[i];
  }

  effect(m) {
    const e = {name: this.string(m.name)};
    if (m.payload) e.payload = this.value(m.payload);
    return e;
  }

  // A pytree, with shared nodes resolved: {kind, children, keys, ...};
  // charged first (`chargeTree`). A tree_nodes entry refers only to entries
  // before it.
  tree(m, what) {
    this.chargeTree(m, what);
    return this._tree(m, this.msg.tree_nodes.length);
  }

  _tree(m, limit) {
    if (m.shared) {
      const i = m.shared - 1;
      if (!(i < limit)) throw new FormatError(`a pytree node refers to shared node ${i}, which is out of range or does not come before it`);
      if (!this._trees[i]) this._trees[i] = this._tree(this.msg.tree_nodes[i], i);
      return this._trees[i];
    }
    const t = {kind: TREE_KIND[m.kind] || String(m.kind), children: m.children.map(c => this._tree(c, limit))};
    if (m.keys.length) t.keys = m.keys.map(v => this.value(v));
    if (m.kind === 6) t.name = m.custom_name;
    if (m.kind === 7) {
      t.name = `${this.string(m.type_module)}.${this.string(m.type_qualname)}`;
      t.child_keys = m.child_keys.map(k => k.$kind === 'dict_key' ? {dict: this.value(k.dict_key)}
        : k.$kind === 'attribute' ? {attr: this.string(k.attribute)}
        : k.$kind === 'sequence_index' ? {seq: k.sequence_index} : {flat: k.flattened_index});
    }
    return t;
  }

  closed(i) {
    if (this._closed[i]) return this._closed[i];
    const m = this.index('closed_jaxprs', i, 'closed jaxpr');
    const j = this.jaxpr(m.jaxpr);
    if (m.consts.length !== j.constvars.length) throw new FormatError(`closed jaxpr ${i} has ${m.consts.length} consts for ${j.constvars.length} constvars`);
    return (this._closed[i] = {index: i, jaxpr: m.jaxpr, consts: m.consts.map(a => this.array(a))});
  }

  // Jaxpr i, its equations resolved: {constvars, invars: [aval], eqns:
  // [{primitive, params, ins: [ref], outs: [{v, aval, dropped}],
  // nameStack, effects}], outvars: [ref]}; a ref is a variable number or
  // {literal: array}.
  jaxpr(i) {
    if (this._jaxprs[i]) return this._jaxprs[i];
    const m = this.index('jaxprs', i, 'jaxpr');
    const avals = [];  // variable number -> aval
    const constvars = m.constvars.map(a => this.aval(a));
    const invars = m.invars.map(a => this.aval(a));
    for (const a of constvars.concat(invars)) avals.push(a);
    const dropped = new Set();
    const ref = (r, where) => {
      if (r < 0) return {literal: this.array(-r - 1)};
      if (r >= avals.length) throw new FormatError(`${where}: variable ${r} is used before it is bound`);
      if (dropped.has(r)) throw new FormatError(`${where}: variable ${r} is a dropped output`);
      return r;
    };
    const eqns = [];
    const addEqn = (kind, ins, outAvals, drops, stack, effects) => {
      const e = eqns.length, where = `jaxpr ${i}, equation ${e} (${kind.primitive})`;
      if (ins.length !== kind.nIn || outAvals.length !== kind.nOut) throw new FormatError(`${where}: arity differs from its kind`);
      const eq = {index: e, primitive: kind.primitive, params: kind.params, ins: ins.map(r => ref(r, where)), outs: [],
                  nameStack: stack, effects};
      outAvals.forEach((a, p) => {
        const v = avals.length;
        avals.push(this.aval(a));
        const d = drops.has(p);
        if (d) dropped.add(v);
        eq.outs.push({v, aval: avals[v], dropped: d});
      });
      eqns.push(eq);
    };
    if (this.formatVersion >= 3) {
      if (m.eqns.length) throw new FormatError(`jaxpr ${i}: a version ${this.formatVersion} jaxpr stores eqns messages`);
      const q = m.equations || decode('Equations', new Uint8Array(0));
      const kinds = u32column(q.kinds, 'kinds'), ins = i32column(q.invars, 'invars'), outs = u32column(q.outvars, 'outvars');
      const stacks = u32column(q.name_stacks, 'name_stacks'), drop = u32column(q.dropped, 'dropped');
      if (stacks.length !== kinds.length) throw new FormatError(`jaxpr ${i}: name_stacks has ${stacks.length} entries for ${kinds.length} equations`);
      const effects = new Map(q.effects.map(e => [e.equation, e.effects.map(x => this.effect(x))]));
      const dropSet = new Set(drop);
      let a = 0, b = 0;
      for (let e = 0; e < kinds.length; e++) {
        const kind = this.kind(kinds[e]);
        if (a + kind.nIn > ins.length || b + kind.nOut > outs.length) throw new FormatError(`jaxpr ${i}, equation ${e}: the columns are too short`);
        const local = new Set();
        for (let p = 0; p < kind.nOut; p++) if (dropSet.has(b + p)) local.add(p);
        addEqn(kind, Array.from(ins.subarray(a, a + kind.nIn)), Array.from(outs.subarray(b, b + kind.nOut)), local,
               this.nameStack(stacks[e]), effects.get(e) || []);
        a += kind.nIn; b += kind.nOut;
      }
      if (a !== ins.length || b !== outs.length) throw new FormatError(`jaxpr ${i}: the equation columns have entries left over`);
    } else {
      for (const e of m.eqns) {
        const kind = {primitive: this.string(e.primitive), params: this.paramSet(e.param_set), nIn: e.invars.length, nOut: e.outvars.length};
        addEqn(kind, e.invars, e.outvars, new Set(e.dropped), this.nameStack(e.name_stack), e.effects.map(x => this.effect(x)));
      }
    }
    const outvars = m.outvars.map(r => ref(r, `jaxpr ${i} outputs`));
    const j = {index: i, constvars, invars, eqns, outvars, nvars: avals.length, avals,
               effects: m.effects.map(x => this.effect(x)), debug: m.debug_info};
    return (this._jaxprs[i] = j);
  }

  root() { return this.closed(this.msg.root); }
  producer() { return Object.assign({format_version: this.formatVersion}, this.msg.producer || {}); }
  metadata() { return this.msg.metadata.map(kv => [kv.key, kv.value]); }
  inTree() { return this.signature('in_tree', 'the input signature'); }
  outTree() { return this.signature('out_tree', 'the output signature'); }
  signature(field, what) {
    if (!(field in this._signatures)) this._signatures[field] = this.msg[field] ? this.tree(this.msg[field], what) : null;
    return this._signatures[field];
  }
}

// ------------------------------------------------------- pytree key paths
function keyText(v) {
  if (typeof v === 'string') return `['${v}']`;
  if (typeof v === 'number') return `[${v}]`;
  // Other keys (records, tuples, ...): JAX writes their Python repr, which
  // this reader cannot know; the record's type name, or the value as JSON.
  if (v && typeof v === 'object' && 'record' in v) return `[${v.record}(…)]`;
  return `[${JSON.stringify(v)}]`;
}

// The key path of every leaf, as jax.tree_util.keystr writes them.
function leafPaths(tree, prefix = '', out = []) {
  if (!tree) return out;
  const k = tree.kind;
  if (k === 'LEAF') { out.push(prefix); return out; }
  tree.children.forEach((c, i) => {
    let step;
    if (k === 'DICT') step = keyText(tree.keys[i]);
    else if (k === 'GENERIC') {
      const key = tree.child_keys[i];
      step = key.attr !== undefined ? `.${key.attr}` : key.dict !== undefined ? keyText(key.dict)
        : `[${key.seq !== undefined ? key.seq : key.flat}]`;
    } else step = `[${i}]`;
    leafPaths(c, prefix + step, out);
  });
  return out;
}

// The inputs' paths: args[...] and kwargs[...] from the (args, kwargs) tree.
function inputPaths(tree) {
  if (!tree || tree.kind !== 'TUPLE' || tree.children.length !== 2) return leafPaths(tree, 'in');
  return leafPaths(tree.children[0], 'args').concat(leafPaths(tree.children[1], 'kwargs'));
}

// ---------------------------------------------------------------- text
function avalText(a) {
  if (!a) return '?';
  if (a.kind === 'token') return 'Token';
  if (a.kind === 'ref') return `Ref{${avalText(a.inner)}}`;
  if (a.kind === 'future') return `AbstractFuture{${avalText(a.inner)}}`;
  if (a.kind === 'lin_val') return `LinVal{${avalText(a.inner)}}`;
  if (a.kind === 'hi_mutable') return a.type === 'box' ? 'BoxTy' : 'Log';  // as JAX prints them
  const d = SHORT[a.dtype] || a.dtype;
  return `${d}[${a.shape.join(',')}]${a.weak ? '{weak}' : ''}`;
}

function byteSize(a) {
  if (!a || a.kind !== 'array') return 0;
  let n = itemsize(a.dtype);
  for (const d of a.shape) n *= (typeof d === 'number' ? d : NaN);
  return n;
}

// ---------------------------------------------------------------- summary
// A JSON summary that tests compare with tests/support/viewer_summary.py's, which
// computes the same from the Python reader. Sub-jaxprs are numbered in
// first-visit order of a depth-first walk from the root (equations in order,
// params in order), so the numbering depends on the program, not the tables.
const FIRST = 8;

function jsonNumber(x) {
  if (typeof x === 'bigint') return {big: x.toString()};
  if (typeof x === 'number' && !Number.isFinite(x)) return {float: Number.isNaN(x) ? 'nan' : (x > 0 ? 'inf' : '-inf')};
  if (Array.isArray(x)) return x.map(jsonNumber);
  return x;
}

function summarize(prog) {
  const jaxprIds = new Map(), closedIds = new Map(), jaxprs = [], closed = [];
  const arraySummary = (arr) => ({aval: avalSummary(arr.aval), kind: arr.kind, nbytes: arr.nbytes,
                                  first: prog.arrayValues(arr, FIRST).map(jsonNumber)});
  const avalSummary = (a) => a.kind === 'array' ? {dtype: a.dtype, shape: a.shape, weak: a.weak}
    : a.kind === 'ref' ? {ref: avalSummary(a.inner)}
    : a.kind === 'future' ? {future: avalSummary(a.inner)}
    : a.kind === 'lin_val' ? {lin_val: avalSummary(a.inner)}
    : a.kind === 'hi_mutable' ? {hi_mutable: a.type} : {token: true};
  const valueSummary = (v) => {
    if (v === null || typeof v === 'boolean' || typeof v === 'string') return v;
    if (typeof v === 'number' || typeof v === 'bigint') return jsonNumber(v);
    if (Array.isArray(v)) return v.map(valueSummary);
    if ('jaxpr' in v) return {jaxpr: visitJaxpr(v.jaxpr)};
    if ('closed_jaxpr' in v) return {closed_jaxpr: visitClosed(v.closed_jaxpr)};
    if ('array' in v) return {array: arraySummary(v.array)};
    if ('aval' in v) return {aval: avalSummary(v.aval)};
    if ('record' in v) return {record: v.record, fields: v.fields.map(valueSummary)};
    if ('codec' in v) return {codec: valueSummary(v.codec)};
    if ('frozenset' in v) return {frozenset: v.frozenset.map(valueSummary)};
    if ('complex' in v) return {complex: jsonNumber(v.complex)};
    if ('treedef' in v) return {treedef: treeSummary(v.treedef)};
    return v;  // dtype, enum, primitive, type, dim, big: already plain
  };
  const treeSummary = (t) => {
    const s = {kind: t.kind, children: t.children.map(treeSummary)};
    if (t.keys) s.keys = t.keys.map(valueSummary);
    if (t.name) s.name = t.name;
    if (t.child_keys) s.child_keys = t.child_keys.map(k => k.dict !== undefined ? {dict: valueSummary(k.dict)} : k);
    return s;
  };
  const refSummary = (r) => typeof r === 'number' ? r : {literal: arraySummary(r.literal)};
  function visitClosed(i) {
    if (closedIds.has(i)) return closedIds.get(i);
    const id = closed.length;
    closedIds.set(i, id);
    const entry = {};
    closed.push(entry);
    const c = prog.closed(i);
    entry.jaxpr = visitJaxpr(c.jaxpr);
    entry.consts = c.consts.map(arraySummary);
    return id;
  }
  function visitJaxpr(i) {
    if (jaxprIds.has(i)) return jaxprIds.get(i);
    const id = jaxprs.length;
    jaxprIds.set(i, id);
    const entry = {};
    jaxprs.push(entry);
    const j = prog.jaxpr(i);
    entry.constvars = j.constvars.map(avalSummary);
    entry.invars = j.invars.map(avalSummary);
    entry.eqns = j.eqns.map(e => ({
      primitive: e.primitive,
      params: e.params.map(([name, v]) => [name, valueSummary(v)]),
      ins: e.ins.map(refSummary),
      outs: e.outs.map(o => o.dropped ? {dropped: avalSummary(o.aval)} : avalSummary(o.aval)),
      name_stack: e.nameStack,
      effects: e.effects.map(x => x.payload === undefined ? [x.name] : [x.name, valueSummary(x.payload)]),
    }));
    entry.outvars = j.outvars.map(refSummary);
    entry.effects = j.effects.map(x => x.payload === undefined ? [x.name] : [x.name, valueSummary(x.payload)]);
    return id;
  }
  const root = visitClosed(prog.msg.root);
  const p = prog.msg.producer || {};
  return {
    format_version: prog.formatVersion,
    producer: [p.jaxpr_io_version || '', p.jax_version || '', p.jaxlib_version || ''],
    metadata: prog.metadata(),
    input_paths: inputPaths(prog.inTree()),
    output_paths: leafPaths(prog.outTree(), 'out'),
    in_tree: prog.inTree() && treeSummary(prog.inTree()),
    out_tree: prog.outTree() && treeSummary(prog.outTree()),
    symbolic_constraints: prog.msg.symbolic_constraints,
    root, jaxprs, closed,
  };
}

const api = {FormatError, crc32, readContainer, decode, Program, summarize, avalText, byteSize, leafPaths,
             inputPaths, half, minifloat, itemsize};
if (typeof module !== 'undefined') module.exports = api;
else root.JaxprReader = api;
})(typeof window !== 'undefined' ? window : globalThis);
