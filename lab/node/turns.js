// Node's side of lull-lab's `turns` scenario (lab/turns_node.c runs it).
//
//   node --expose-gc turns.js FIGURE key=value...
//
// Measures one figure once and prints one JSON line on stdout:
//   {"figure": "...", "values": [...]}   (null: not measurable in Node)
// The value order matches lab/turns.h for each figure.
'use strict';

const { Worker } = require('worker_threads');
const fs = require('fs');
const net = require('net');

const figure = process.argv[2];
const opt = {};
for (const arg of process.argv.slice(3)) {
  const [k, v] = arg.split('=');
  opt[k] = Number(v);
}

const now = () => process.hrtime.bigint(); // ns, monotonic

function emit(values) {
  process.stdout.write(JSON.stringify({ figure, values }) + '\n');
}

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const pos = p * (sorted.length - 1);
  const i = Math.floor(pos);
  if (i + 1 >= sorted.length) return sorted[sorted.length - 1];
  return sorted[i] + (sorted[i + 1] - sorted[i]) * (pos - i);
}

// Lateness: p50, p99, max and min in µs from samples in ns.
function lateness(samples) {
  const s = Float64Array.from(samples).sort();
  return [percentile(s, 0.5) / 1e3, percentile(s, 0.99) / 1e3,
    s[s.length - 1] / 1e3, s[0] / 1e3];
}

// Round trip: p50, p99 and mean in µs from samples in ns.
function trip(samples) {
  const s = Float64Array.from(samples).sort();
  const mean = s.reduce((a, b) => a + b, 0) / s.length;
  return [percentile(s, 0.5) / 1e3, percentile(s, 0.99) / 1e3, mean / 1e3];
}

// libuv iterations so far (one poll each); null where Node does not say
// (uvMetricsInfo arrived in Node 20.18 and 22.8).
function loopCount() {
  const { performance } = require('perf_hooks');
  const info = performance.nodeTiming.uvMetricsInfo;
  return info ? info.loopCount : null;
}

function pollsPerHop(before, hops) {
  const after = loopCount();
  return before === null || after === null ? null : (after - before) / hops;
}

// xorshift64* as in lab/stats.c, on BigInt: reproducible random deadlines.
function makeRandom(seed) {
  let x = BigInt(seed) | 1n;
  const mask = (1n << 64n) - 1n;
  return () => {
    x ^= x >> 12n;
    x = (x ^ (x << 25n)) & mask;
    x ^= x >> 27n;
    return Number(((x * 0x2545F4914F6CDD1Dn) & mask) >> 11n) / 2 ** 53;
  };
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

const figures = {
  // setImmediate callbacks queued from an immediate run in the next
  // iteration, after the poll phase.
  chain_task() {
    let left = opt.hops;
    const loops0 = loopCount();
    const t0 = now();
    const hop = () => {
      if (--left > 0) return setImmediate(hop);
      emit([Number(now() - t0) / opt.hops, pollsPerHop(loops0, opt.hops)]);
    };
    setImmediate(hop);
  },

  // setTimeout(0) is clamped to 1 ms, so this chain is short (slow_hops).
  chain_timer0() {
    let left = opt.slow_hops;
    const loops0 = loopCount();
    const t0 = now();
    const hop = () => {
      if (--left > 0) return setTimeout(hop, 0);
      emit([Number(now() - t0) / opt.slow_hops,
        pollsPerHop(loops0, opt.slow_hops)]);
    };
    setTimeout(hop, 0);
  },

  lateness() {
    const samples = [];
    let due = now() + 1000000n;
    const fire = () => {
      samples.push(Number(now() - due));
      if (samples.length >= opt.samples) return emit(lateness(samples));
      due = now() + 1000000n;
      setTimeout(fire, 1);
    };
    setTimeout(fire, 1);
  },

  // handles/2 client sockets connected to a local server: handles sockets
  // watched in all, and handles timers due in 1-2 h, as every row holds.
  // Node cannot count its loop's wakeups: null.
  idle() {
    const sockets = [];
    const timers = [];
    for (let i = 0; i < opt.handles; i++)
      timers.push(setTimeout(() => {}, 3600e3 * (1 + Math.random())));
    const pairs = opt.handles / 2;
    let ready = 0;
    // Both ends of every connection exist, then a short settle (V8's
    // start-up compilation), then the window.
    const oneEnd = () => {
      if (++ready === 2 * pairs) setTimeout(measure, 100);
    };
    // At most INFLIGHT connections not yet accepted: a burst past the
    // listen backlog loses handshakes the client thinks complete, and the
    // server never sees them.
    const INFLIGHT = 128;
    let launched = 0;
    let port = 0;
    const launch = () => {
      if (launched >= pairs) return;
      launched++;
      sockets.push(net.connect(port, '127.0.0.1', oneEnd));
    };
    const server = net.createServer((s) => {
      sockets.push(s);
      oneEnd();
      launch();
    });
    server.listen(0, '127.0.0.1', () => {
      port = server.address().port;
      for (let i = 0; i < INFLIGHT; i++) launch();
    });
    function measure() {
      const cpu0 = process.cpuUsage();
      const cs0 = voluntarySwitches();
      setTimeout(() => {
        const cpu = process.cpuUsage(cpu0);
        const cs1 = voluntarySwitches();
        const us = cpu.user + cpu.system;
        emit([null, cs0 === null ? null : cs1 - cs0, us,
          us / (opt.window_ms / 1000)]);
        for (const s of sockets) s.destroy();
        for (const t of timers) clearTimeout(t);
        server.close();
      }, opt.window_ms);
    }
  },

  // The main thread and a worker ping-pong over a MessagePort; the parent
  // pinned the whole process to one CPU.
  roundtrip() {
    const worker = new Worker(
      `const { parentPort } = require('worker_threads');
       parentPort.on('message', (m) => {
         if (m === 'end') return parentPort.close();
         parentPort.postMessage(m);
       });`, { eval: true });
    const samples = [];
    const total = opt.warmup + opt.trips;
    let done = 0;
    let sent = now();
    worker.on('message', () => {
      const t = now();
      if (done++ >= opt.warmup) samples.push(Number(t - sent));
      if (done < total) {
        sent = now();
        worker.postMessage(1);
      } else {
        emit(trip(samples));
        worker.postMessage('end');
        worker.unref();
      }
    });
    worker.on('online', () => {
      sent = now();
      worker.postMessage(1);
    });
  },

  // Heap bytes per Timeout object (after gc), then ROUNDS rounds of arming
  // opt.pairs more and cancelling them, with opt.timers armed: the first
  // round (growth) and the median of the others (steady state), as
  // lab/turns_util.c reports them.
  timers() {
    const ROUNDS = 4; // TURNS_TIMER_ROUNDS
    const random = makeRandom(opt.seed);
    const delay = () => 1000 + Math.floor(random() * 999000); // ms
    const noop = () => {};
    global.gc && global.gc();
    const heap0 = process.memoryUsage().heapUsed;
    const armed = new Array(opt.timers);
    for (let i = 0; i < opt.timers; i++) armed[i] = setTimeout(noop, delay());
    global.gc && global.gc();
    const heap1 = process.memoryUsage().heapUsed;
    const delays = new Array(opt.pairs);
    for (let i = 0; i < opt.pairs; i++) delays[i] = delay();
    const extra = new Array(opt.pairs);
    const rounds = [];
    let faults = null;
    for (let r = 0; r < ROUNDS; r++) {
      const f0 = process.resourceUsage().minorPageFault;
      const t0 = now();
      for (let i = 0; i < opt.pairs; i++)
        extra[i] = setTimeout(noop, delays[i]);
      const t1 = now();
      for (let i = 0; i < opt.pairs; i++) clearTimeout(extra[i]);
      const t2 = now();
      if (r === 0) faults = process.resourceUsage().minorPageFault - f0;
      rounds.push([Number(t2 - t0), Number(t1 - t0), Number(t2 - t1)]);
    }
    const steady = rounds.slice(1).sort((a, b) => a[0] - b[0]);
    const m = steady[Math.floor((steady.length - 1) / 2)];
    emit([m[0] / opt.pairs, m[1] / opt.pairs, m[2] / opt.pairs,
      rounds[0][0] / opt.pairs, faults, (heap1 - heap0) / opt.timers]);
    for (const t of armed) clearTimeout(t);
  },
};

if (!figures[figure]) {
  process.stderr.write(`turns.js: unknown figure ${figure}\n`);
  process.exit(2);
}
figures[figure]();
