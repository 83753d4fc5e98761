// Node's side of lull-lab's `loopback` scenario (lab/loopback_node.c runs
// it): the workload of lab/loopback.h, line for line, over a loopback link
// that delivers one frame per turn, where a turn is
//   setTimeout     setTimeout(fn, 0) (Node clamps it to 1 ms)
//   setImmediate   setImmediate(fn)
//   MessageChannel a message posted to the turn's own port
//
//   node loopback.js mode=setImmediate reps=20 warmup=20 commits=100 \
//     effects=24 rounds=10
//
// `warmup` runs of each workload go first, unmeasured: V8 compiles the hot
// functions in them (the C rows run one unmeasured run each).
// Prints one JSON line: {"mode": ..., "commits_ms": ..., "graph_ms": ...,
// "commits_frames": ..., "graph_frames": ..., "commits_turns": ...,
// "graph_turns": ..., "commits_timers": ..., "graph_timers": ...,
// "commits_polls": ..., "graph_polls": ...}, per run of a workload (ms: the
// median of `reps` runs timed one by one; polls: libuv iterations).
'use strict';

const { MessageChannel } = require('worker_threads');

const opt = { mode: 'setImmediate', reps: 1, warmup: 0, commits: 100,
  effects: 24, rounds: 10 };
for (const arg of process.argv.slice(2)) {
  const [k, v] = arg.split('=');
  opt[k] = k === 'mode' ? v : Number(v);
}

const now = () => process.hrtime.bigint();

// libuv iterations so far (one poll each); null where Node does not say
// (uvMetricsInfo arrived in Node 20.18 and 22.8).
function loopCount() {
  const { performance } = require('perf_hooks');
  const info = performance.nodeTiming.uvMetricsInfo;
  return info ? info.loopCount : null;
}
const COMMIT = 1, ACK = 2, UPDATE = 3;

// A turn: at most one pending run of fn, claimed by claim().
let arms = 0;
function makeTurn(fn) {
  const t = { armed: false };
  const run = () => {
    t.armed = false;
    fn();
  };
  let post;
  if (opt.mode === 'setTimeout') {
    post = () => setTimeout(run, 0);
  } else if (opt.mode === 'setImmediate') {
    post = () => setImmediate(run);
  } else if (opt.mode === 'MessageChannel') {
    const ch = new MessageChannel();
    ch.port1.onmessage = run;
    post = () => ch.port2.postMessage(null);
    t.close = () => ch.port1.close();
  } else {
    throw new Error(`loopback.js: unknown mode ${opt.mode}`);
  }
  t.claim = () => {
    if (t.armed) return;
    t.armed = true;
    arms++;
    post();
  };
  return t;
}

// The link: one inbox per receiving side, one frame per turn. Frames are
// 16-byte buffers from a pool, as in the C rows.
function makeLink(onFrame, onRefresh) {
  const inbox = [[], []];
  const pool = [];
  const deliver = [0, 1].map((side) => {
    const t = makeTurn(() => {
      const f = inbox[side].shift();
      if (f === undefined) return;
      onFrame(side, f);
      pool.push(f);
      if (inbox[side].length) t.claim();
    });
    return t;
  });
  const refresh = makeTurn(onRefresh);
  return {
    send(side, type, key, value) {
      const f = pool.pop() || Buffer.alloc(16);
      f.writeUInt32LE(type, 0);
      f.writeUInt32LE(key, 4);
      f.writeDoubleLE(value, 8);
      inbox[1 - side].push(f);
      deliver[1 - side].claim();
    },
    refresh: () => refresh.claim(),
    close() {
      for (const t of [...deliver, refresh]) if (t.close) t.close();
    },
  };
}

// The workload (lab/loopback.c: lb_work_*), on one link for every run.
let w = null; // the run in progress
const link = makeLink((side, f) => {
  const type = f.readUInt32LE(0), key = f.readUInt32LE(4);
  const v = f.readDoubleLE(8);
  w.frames++;
  if (side === 1) {
    if (type !== COMMIT) return;
    w.store[key] = v;
    w.dirty.push(key);
    link.refresh();
    return;
  }
  if (type === UPDATE) {
    link.send(0, COMMIT, key, (v * 3 + key) % 1e9);
  } else if (type === ACK) {
    w.acked++;
    if (!w.graph) {
      if (w.acked < opt.commits) link.send(0, COMMIT, 0, ++w.value);
      else w.done(w.frames);
    } else if (w.acked === opt.effects + 1) {
      w.acked = 0;
      if (++w.round < opt.rounds) link.send(0, COMMIT, 0, ++w.value);
      else w.done(w.frames);
    }
  }
}, () => {
  const keys = w.dirty;
  w.dirty = [];
  for (const k of keys) {
    link.send(1, ACK, k, w.store[k]);
    if (!w.graph) continue;
    for (let e = 2 * k; e <= 2 * k + 1; e++)
      if (e >= 1 && e <= opt.effects) link.send(1, UPDATE, e, w.store[k]);
  }
});

function runWorkload(graph, done) {
  w = { graph, done, store: new Float64Array(opt.effects + 1), dirty: [],
    acked: 0, round: 0, value: 0, frames: 0 };
  link.send(0, COMMIT, 0, ++w.value);
}

function expected(graph) {
  return graph ? opt.rounds * (3 * opt.effects + 2) : 2 * opt.commits;
}

// Unmeasured runs of both workloads.
function warmup(left, next) {
  if (left <= 0) return next();
  runWorkload(false, () => runWorkload(true, () => warmup(left - 1, next)));
}

function median(v) {
  const s = Float64Array.from(v).sort();
  const m = (s.length - 1) / 2;
  return (s[Math.floor(m)] + s[Math.ceil(m)]) / 2;
}

// reps runs of a workload one after another, each timed alone (the
// median is the figure, as in the C rows); then the next workload.
const out = { mode: opt.mode };
function measure(graph, next) {
  const name = graph ? 'graph' : 'commits';
  const arms0 = arms;
  const loops0 = loopCount();
  const durations = [];
  let t0 = now();
  const again = (frames) => {
    durations.push(Number(now() - t0));
    if (frames !== expected(graph)) {
      process.stderr.write(`loopback.js: ${name}: ${frames} frames\n`);
      process.exit(1);
    }
    if (durations.length < opt.reps) {
      t0 = now();
      return runWorkload(graph, again);
    }
    const turns = (arms - arms0) / opt.reps;
    const loops1 = loopCount();
    out[`${name}_polls`] =
      loops0 === null || loops1 === null ? null : (loops1 - loops0) / opt.reps;
    out[`${name}_ms`] = median(durations) / 1e6;
    out[`${name}_frames`] = frames;
    out[`${name}_turns`] = turns;
    out[`${name}_timers`] = opt.mode === 'setTimeout' ? turns : 0;
    next();
  };
  runWorkload(graph, again);
}

warmup(opt.warmup, () => measure(false, () => measure(true, () => {
  link.close();
  process.stdout.write(JSON.stringify(out) + '\n');
})));
