// Node's transport of lull-lab's `runner` scenario (lab/runner_node.c runs
// it, one process per measurement):
//
//   node runner.js lab=PATH mode=poll|notify runners=N events=40
//                  interval_ns=15000000 poll_ms=5 idle_ms=2000 aligned=0|1
//                  cpus=T,R
//
// Spawns N runners (`lull-lab runner-child ID EVENTS INTERVAL_NS`, the
// same children lull's transport drives: lab/runner.h has their records)
// with child_process.spawn and stdio pipes, waits for each one's READY
// record, measures an idle window, sends every runner the same start time
// (all stream their turn at once, each on its own phase unless aligned=1),
// delivers one turn of each to a driver that checks
// every event (once, in order, intact), closes the runners' stdin and
// waits for their exits. Prints one JSON line on stdout.
//
//   poll    the polling pump: setInterval(pass, 5) per session;
//           the pass reads the runner's stdout stream (stream.read(): what
//           libuv has read from the pipe into the stream's buffer).
//   notify  the after: the stream's 'data' appends to the session's window
//           and wakes one pass in the next task (setImmediate), shared by
//           every chunk that arrives before it runs.
//
// Idle wakeups are the main thread's voluntary context switches
// (/proc/thread-self/status) less the one that ends the window; idle CPU is
// process.cpuUsage(), the whole process's.
'use strict';

const { spawn } = require('child_process');
const fs = require('fs');

const opt = {};
for (const arg of process.argv.slice(2)) {
  const i = arg.indexOf('=');
  opt[arg.slice(0, i)] = arg.slice(i + 1);
}
const N = Number(opt.runners);
const EVENTS = Number(opt.events);
const INTERVAL = BigInt(opt.interval_ns);
const POLL_MS = Number(opt.poll_ms);
const IDLE_MS = Number(opt.idle_ms);
const MODE = opt.mode;
const LAB = opt.lab;
const ALIGNED = opt.aligned === '1'; // lab/runner.h: RUNNER_GO_ALIGNED
// The transport's CPU and the runners' (-1: not pinned, the machine's line),
// as lab/runner_cpu.c reads them.
const CPUS = (opt.cpus || '-1,-1').split(',').map(Number);

const REC = 32; // lab/runner.h: RUNNER_RECORD and the fields below
const MAGIC = 0x524e5552;
const TERMINAL = 1;
const READY = 2;
const NO_SEQ = 0xffffffff;

const now = () => process.hrtime.bigint(); // CLOCK_MONOTONIC, as the runners

// runner_check of lab/runner.h, in 32-bit arithmetic.
function check(runner, seq, flags) {
  let h = (Math.imul(runner, 0x9E3779B1) ^ Math.imul(seq, 0x85EBCA77) ^
    Math.imul(flags, 0xC2B2AE3D)) >>> 0;
  h = (h ^ (h >>> 15)) >>> 0;
  h = Math.imul(h, 0x2C1B3C6D) >>> 0;
  return (h ^ (h >>> 12)) >>> 0;
}

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const pos = p * (sorted.length - 1);
  const i = Math.floor(pos);
  if (i + 1 >= sorted.length) return sorted[sorted.length - 1];
  return sorted[i] + (sorted[i + 1] - sorted[i]) * (pos - i);
}

// The main thread's voluntary context switches (Linux only).
function voluntarySwitches() {
  try {
    const status = fs.readFileSync('/proc/thread-self/status', 'utf8');
    const m = /voluntary_ctxt_switches:\s+(\d+)/.exec(status);
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

const sessions = [];
const waits = new Float64Array(N * EVENTS);
let nwait = 0;
let phase = 'ready';
let nready = 0;
let done = 0;
let errors = 0;
let why = '';
let errno = 0;
let deadline = null;
const result = {};
const tSpawn = now();

function fail(msg) {
  if (errors++ === 0) why = msg;
  shutdown();
}

// /proc/stat's ticks of the two CPUs: [busy, steal, all] each, as
// lab/runner_cpu.c's runner_stat_read.
function readStat() {
  let text = '';
  try {
    text = fs.readFileSync('/proc/stat', 'utf8');
  } catch {
    return null;
  }
  return CPUS.map((cpu) => {
    const name = cpu < 0 ? 'cpu ' : `cpu${cpu} `;
    const line = text.split('\n').find((l) => l.startsWith(name));
    if (!line) return [0, 0, 0];
    const v = line.slice(name.length).trim().split(/\s+/).slice(0, 8)
      .map(Number);
    const busy = v[0] + v[1] + v[2] + v[5] + v[6];
    return [busy, v[7] || 0, v.reduce((a, b) => a + (b || 0), 0)];
  });
}

// ------------------------------------------------------------- driver

function receive(s, buf, off, t) {
  const magic = buf.readUInt32LE(off);
  const runner = buf.readUInt32LE(off + 4);
  const seq = buf.readUInt32LE(off + 8);
  const flags = buf.readUInt32LE(off + 12);
  const commit = buf.readBigUInt64LE(off + 16);
  const sum = buf.readUInt32LE(off + 24);
  if (!s.ready) {
    if (magic !== MAGIC || runner !== s.index || flags !== READY ||
        seq !== NO_SEQ || sum !== check(s.index, NO_SEQ, READY))
      return fail(`runner ${s.index}: its first record is not READY`);
    s.ready = true;
    if (++nready === N && phase === 'ready') setImmediate(beginIdle);
    return;
  }
  if (phase !== 'stream')
    return fail(`runner ${s.index}: a record outside its turn`);
  let wrong = null;
  if (magic !== MAGIC) wrong = 'a record without the magic number';
  else if (runner !== s.index) wrong = `a record of runner ${runner}`;
  else if (flags & READY) wrong = 'a second READY record';
  else if (seq !== s.next)
    wrong = `event ${seq} where event ${s.next} was due (lost, repeated or ` +
      'out of order)';
  else if (seq >= EVENTS) wrong = `event ${seq} after the turn's last`;
  else if (sum !== check(runner, seq, flags))
    wrong = `event ${seq}: checksum wrong`;
  else if (((flags & TERMINAL) !== 0) !== (seq + 1 === EVENTS))
    wrong = `event ${seq}: terminal flag wrong`;
  if (wrong) return fail(`runner ${s.index}: ${wrong}`);
  s.next++;
  const w = Number(t - commit);
  waits[nwait++] = w > 0 ? w : 0;
  if ((flags & TERMINAL) && ++done === N) endStream();
}

// The delivery pass, the same in both modes: one read of the session's
// window, every whole record in it to the driver.
function pass(s) {
  s.scheduled = false;
  if (errors) return;
  s.reads++;
  let chunk = null;
  if (MODE === 'poll') {
    chunk = s.child.stdout.read();
  } else if (s.window.length) {
    chunk = s.window.length === 1 ? s.window[0] : Buffer.concat(s.window);
    s.window = [];
  }
  if (!chunk) return;
  if (s.part) {
    chunk = Buffer.concat([s.part, chunk]);
    s.part = null;
  }
  const t = now();
  const whole = chunk.length - (chunk.length % REC);
  for (let off = 0; off < whole && !errors; off += REC)
    receive(s, chunk, off, t);
  if (whole < chunk.length) s.part = chunk.subarray(whole);
}

// ------------------------------------------------------------ runners

function start(i) {
  const child = spawn(LAB, ['runner-child', String(i), String(EVENTS),
    String(INTERVAL)], { stdio: ['pipe', 'pipe', 'inherit'] });
  const s = { index: i, child, window: [], part: null, next: 0, reads: 0,
    ready: false, scheduled: false, running: true, timer: null };
  sessions.push(s);
  child.on('error', (err) => {
    if (!errno) errno = err.errno || -5;
    s.running = false;
    fail(`spawning runner ${i + 1} of ${N}: ${err.message}`);
  });
  child.on('exit', (code, signal) => {
    if (!s.running) return; // a failed spawn: its 'error' said so
    s.running = false;
    if (phase !== 'shutdown')
      fail(`runner ${i} ended before its transport was done: ` +
        (signal ? `signal ${signal}` : `status ${code}`));
    else if ((code !== 0 || signal) && !errors)
      fail(`runner ${i} ended with ${signal || code}`);
    maybeFinish();
  });
  if (!child.stdin || !child.stdout) return; // spawn failed: 'error' says so
  child.stdin.on('error', () => {}); // EPIPE from a runner that died: above
  if (MODE === 'poll') {
    s.timer = setInterval(pass, POLL_MS, s);
  } else {
    child.stdout.on('data', (chunk) => {
      s.window.push(chunk);
      if (!s.scheduled) {
        s.scheduled = true;
        setImmediate(pass, s);
      }
    });
  }
}

// ------------------------------------------------------------- phases

let idle0 = null;
let stream0 = null;

function beginIdle() {
  clearTimeout(deadline);
  result.ready_ms = Number(now() - tSpawn) / 1e6;
  phase = 'idle';
  let reads = 0;
  for (const s of sessions) reads += s.reads;
  idle0 = { t: now(), cpu: process.cpuUsage(), cs: voluntarySwitches(), reads };
  setTimeout(endIdle, IDLE_MS);
}

function endIdle() {
  const t1 = now();
  const cs1 = voluntarySwitches();
  const cpu = process.cpuUsage(idle0.cpu);
  let reads = 0;
  for (const s of sessions) reads += s.reads;
  const secs = Number(t1 - idle0.t) / 1e9;
  const per = secs * N;
  result.idle_s = secs;
  result.idle_reads = (reads - idle0.reads) / per;
  result.idle_wakeups = idle0.cs === null || cs1 === null ? null
    : Math.max(cs1 - idle0.cs - 1, 0) / per;
  result.idle_cpu_ms = (cpu.user + cpu.system) / 1e3 / secs;
  if (errors) return;
  phase = 'stream';
  let reads0 = 0;
  for (const s of sessions) reads0 += s.reads;
  stream0 = { cpu: process.cpuUsage(), stat: readStat(), reads: reads0 };
  // Every runner reads the same start before its first event is due.
  const start = now() + 2000000n + 10000n * BigInt(N);
  for (const s of sessions) {
    const cmd = Buffer.alloc(16); // runner_go
    cmd.writeBigUInt64LE(start, 0);
    cmd.writeUInt32LE(ALIGNED ? 1 : 0, 8);
    s.child.stdin.write(cmd);
  }
  const turn = Number(BigInt(EVENTS + 2) * INTERVAL / 1000000n);
  deadline = setTimeout(() => fail(`${done} of ${N} turns delivered in ` +
    'full before the deadline'), turn + 30000);
}

function endStream() {
  // The stream's CPU figures (lab/runner.h's runner_result): the process's
  // CPU from the start commands to the last event, per event; each CPU's
  // busy share and the steal.
  const cpu = process.cpuUsage(stream0.cpu);
  const stat = readStat();
  result.cpu_per_event_ns = (cpu.user + cpu.system) * 1e3 / nwait;
  let reads = -stream0.reads;
  for (const s of sessions) reads += s.reads;
  result.events_per_read = reads > 0 ? nwait / reads : null;
  if (stat && stream0.stat) {
    const d = stat.map((s, k) => s.map((x, i) => x - stream0.stat[k][i]));
    const pct = (k) => (d[k][2] > 0 ? 100 * d[k][0] / d[k][2] : null);
    result.busy_transport_pct = pct(0);
    result.busy_runners_pct = pct(1);
    const all = d[0][2] + d[1][2];
    result.steal_pct = all > 0 ? 100 * (d[0][1] + d[1][1]) / all : null;
  }
  const sorted = waits.subarray(0, nwait).sort();
  let sum = 0;
  for (const w of sorted) sum += w;
  result.delivered = nwait;
  result.wait_p50_us = percentile(sorted, 0.5) / 1e3;
  result.wait_p95_us = percentile(sorted, 0.95) / 1e3;
  result.wait_p99_us = percentile(sorted, 0.99) / 1e3;
  result.wait_max_us = sorted[sorted.length - 1] / 1e3;
  result.wait_mean_us = sum / nwait / 1e3;
  shutdown();
}

// Every runner's stdin closed: each reads EOF and exits.
function shutdown() {
  if (phase === 'shutdown') return;
  phase = 'shutdown';
  if (deadline) clearTimeout(deadline);
  for (const s of sessions) {
    if (s.timer) clearInterval(s.timer);
    if (s.child.stdin) s.child.stdin.end();
  }
  // A runner that does not leave on EOF is killed after 10 s.
  setTimeout(() => {
    for (const s of sessions) if (s.running) s.child.kill('SIGKILL');
    if (!errors) fail('a runner did not exit on its stdin\'s EOF');
  }, 10000).unref();
  maybeFinish();
}

function maybeFinish() {
  if (phase !== 'shutdown') return;
  for (const s of sessions) if (s.running) return;
  result.errors = errors;
  result.why = why;
  result.errno = errno;
  process.stdout.write(JSON.stringify(result) + '\n');
  process.exit(0);
}

// Up: every runner's READY record read (30 s, and 10 ms a runner).
// Not a delivery error: lull-lab reads errno (ETIMEDOUT), as for its own.
deadline = setTimeout(() => {
  if (!errno) errno = -110;
  fail(`${nready} of ${N} runners ready before the deadline`);
}, 30000 + 10 * N);
for (let i = 0; i < N && !errors; i++) start(i);
