// vidline dashboard: follows /v1/events (Server-Sent Events, read with fetch so a bearer
// token can go with it) and draws the coordinator's view. No libraries, no network beyond
// this node. A token, when the node wants one, is given in the page's fragment:
// /dashboard/#token=SECRET (never sent in a URL to the server).
'use strict';

const token = new URLSearchParams(location.hash.slice(1)).get('token');
const headers = token ? { Authorization: 'Bearer ' + token } : {};
const SVGNS = 'http://www.w3.org/2000/svg';

const view = {
  cluster: null,     // status @cluster
  run: null,         // the run's status (snapshot, then updated by events)
  jobs: new Map(),   // index -> job record
  plan: null,        // {planned_finish_s, makespan_s}
  summary: null,     // the latest `run` event
  failures: [],      // failure events, newest last
  receivedAt: 0,     // Date.now() when now_s was last set
  finished: '',      // the run whose `end` came; shown (data-run-finished) once drawn
  pendingMax: {},    // decoder -> most pending seen
};

function $(id) { return document.getElementById(id); }
function text(el, t) { el.textContent = t; }
function fmtS(s) {
  if (s == null || !isFinite(s)) return '–';
  if (s < 90) return s.toFixed(0) + ' s';
  if (s < 5400) return (s / 60).toFixed(1) + ' min';
  return (s / 3600).toFixed(1) + ' h';
}
function el(tag, attrs, parent) {
  const e = document.createElementNS(SVGNS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}

let renderQueued = false;
function schedule() {
  if (renderQueued) return;
  renderQueued = true;
  setTimeout(() => { renderQueued = false; render(); }, 80);
}

// The run's clock: running, the coordinator's now (carried on between events); ended, the
// end of its last stage, so a finished run's lanes are not squashed by the time since.
function endS() {
  let end = (view.run.summary && view.run.summary.makespan_s) || 0;
  for (const j of view.jobs.values())
    for (const s of Object.values(j.stages || {})) if (s && s.end_s != null) end = Math.max(end, s.end_s);
  return end;
}

// A job's shot in words beside its index: its name (or shot and take), the prompt's first words.
function shotWords(j) {
  let name = j.name || (j.shot ? j.shot + (j.take ? ' take ' + (j.take + 1) : '') : '');
  const words = (j.prompt_start || '').split(/\s+/).filter(Boolean);
  const prompt = words.slice(0, 6).join(' ') + (words.length > 6 ? '...' : '');
  return prompt ? (name ? name + ' "' + prompt + '"' : '"' + prompt + '"') : name;
}
function jobLabel(j) {
  const w = shotWords(j);
  return 'job ' + j.index + (w ? ' ' + w : '');
}

function nowS() {
  if (!view.run) return 0;
  if (view.run.state !== 'running') return endS();
  let n = view.run.now_s || 0;
  if (view.run.state === 'running' && view.receivedAt) {
    const scale = (view.run.clock && view.run.clock.time_scale) || 1;
    n += Math.min(Date.now() - view.receivedAt, 5000) / 1000 / scale;  // no further than 5 s past the last word
  }
  return n;
}

// -- events ------------------------------------------------------------------------------
const on = {
  snapshot(d) {
    view.run = d;
    view.jobs = new Map(d.jobs.map(j => [j.index, j]));
    view.failures = [];
    for (const j of d.jobs) {
      for (const f of j.failed_attempts || []) view.failures.push(Object.assign({ index: j.index }, f));
      if (j.state === 'failed') view.failures.push({ index: j.index, stage: 'job', reason: j.error });
    }
    view.plan = null;
    view.receivedAt = Date.now();
    document.body.dataset.runId = d.run_id;
    view.finished = '';
  },
  job(d) {
    const old = view.jobs.get(d.index) || {};
    view.jobs.set(d.index, Object.assign({}, old, d));
  },
  progress(d) {
    const j = view.jobs.get(d.index);
    if (j) j.progress = { step: d.step, steps: d.steps };
  },
  failure(d) { view.failures.push(d); },
  run(d) {
    view.summary = d;
    if (view.run && d.run_id === view.run.run_id) {
      view.run.state = d.state;
      view.run.summary = d.summary;
      view.run.outages = d.outages;
      view.run.now_s = d.now_s;
      view.receivedAt = Date.now();
    }
  },
  plan(d) { view.plan = d; },
  cluster(d) { view.cluster = d; },
  end(d) {
    if (view.run && d.run_id === view.run.run_id) {
      view.run.state = d.state;
      view.run.summary = d.summary;
    }
    view.finished = d.run_id;
  },
  error(d) { console.warn('vidline:', d.error); },
};

function dispatch(name, data) {
  const f = on[name];
  if (!f) return;
  try { f(JSON.parse(data)); } catch (e) { console.error(name, e); }
  schedule();
}

async function follow() {
  for (;;) {
    try {
      const res = await fetch('/v1/events', { headers, cache: 'no-store' });
      if (!res.ok) throw new Error('HTTP ' + res.status + (res.status === 401 ? ' (open /dashboard/#token=...)' : ''));
      connected(true);
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let at;
        while ((at = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, at);
          buf = buf.slice(at + 2);
          let name = 'message', data = [];
          for (const line of block.split('\n')) {
            if (line.startsWith('event: ')) name = line.slice(7);
            else if (line.startsWith('data: ')) data.push(line.slice(6));
          }
          if (data.length) dispatch(name, data.join('\n'));
        }
      }
    } catch (e) {
      console.warn('vidline: event stream:', e.message);
    }
    connected(false);
    await new Promise(r => setTimeout(r, 2000));
  }
}

function connected(yes) {
  const c = $('connection');
  text(c, yes ? 'live' : 'reconnecting');
  c.className = 'badge ' + (yes ? 'up' : 'down');
  document.body.dataset.connected = yes ? 'yes' : 'no';
}

// -- drawing -----------------------------------------------------------------------------
function render() {
  renderHeader();
  renderSummary();
  renderHosts();
  renderPools();
  renderDecoders();
  renderJobs();
  renderReview();
  renderGantt();
  renderFailures();
  // Last, so that a run marked finished is one whose final state is already on the page.
  document.body.dataset.runFinished = view.finished;
}

function renderHeader() {
  const r = view.run;
  const state = r ? r.state : 'none';
  text($('run-title'), r ? 'run ' + r.run_id + ' · mode ' + r.mode : 'no run yet');
  const b = $('run-state');
  text(b, state);
  b.className = 'badge ' + state;
  document.body.dataset.runState = state;
}

const FINAL = new Set(['succeeded', 'failed', 'cancelled', 'reused']);  // cancelled: `vidline cancel`; reused: its job key's output existed

function jobsDone() {
  let n = 0;
  for (const j of view.jobs.values()) if (FINAL.has(j.state)) n++;
  return n;
}

function renderSummary() {
  const r = view.run;
  if (!r) return;
  const total = view.jobs.size, done = jobsDone();
  text($('done'), done + ' / ' + total);
  const now = nowS();
  const plan = view.plan && view.plan.planned_finish_s;
  if (plan && plan.length) {
    const by = plan.filter(t => t <= now).length;
    text($('planned'), Math.min(by, total) + ' / ' + total);
    let eta = null;
    if (r.state === 'running' && done < plan.length) {
      const at = done ? plan[done - 1] : 0;
      eta = (plan[plan.length - 1] - at) * (done && at > 0 ? Math.max(1, now / at) : 1);
    } else if (r.state !== 'running') eta = 0;
    if (view.summary && view.summary.eta_s != null && r.state === 'running') eta = view.summary.eta_s;
    text($('eta'), r.state === 'running' ? fmtS(eta) : 'finished');
  } else {
    text($('planned'), '–');
    text($('eta'), r.state === 'running' ? 'no plan' : 'finished');
  }
  const cph = r.summary && r.summary.clips_per_hour;
  text($('throughput'), cph ? Number(cph).toFixed(1) : '–');
  text($('clock'), fmtS(now) + (r.clock && r.clock.simulated ? ' (simulated)' : ''));
  drawProgress(now, plan);
}

function drawProgress(now, plan) {
  const svg = $('progress-chart');
  svg.replaceChildren();
  const total = view.jobs.size;
  if (!total) return;
  const ends = [];
  for (const j of view.jobs.values())
    if (j.times && j.times.decode_end_s != null) ends.push(j.times.decode_end_s);
  ends.sort((a, b) => a - b);
  const tmax = Math.max(now, plan && plan.length ? plan[plan.length - 1] : 0, 1);
  const W = 400, H = 120, L = 30, B = 18;
  const x = t => L + (W - L - 5) * t / tmax, y = n => H - B - (H - B - 5) * n / total;
  el('line', { x1: L, y1: H - B, x2: W - 5, y2: H - B, stroke: '#ccc' }, svg);
  el('text', { x: 2, y: y(total) + 4 }, svg).textContent = total;
  el('text', { x: 2, y: H - B }, svg).textContent = '0';
  el('text', { x: W - 60, y: H - 4 }, svg).textContent = fmtS(tmax);
  const steps = (ts) => {
    let d = 'M' + x(0) + ',' + y(0), n = 0;
    for (const t of ts) { d += ' L' + x(t) + ',' + y(n); n++; d += ' L' + x(t) + ',' + y(n); }
    return d;
  };
  if (plan && plan.length) el('path', { d: steps(plan) + ' L' + x(tmax) + ',' + y(plan.length), class: 'plan-line' }, svg);
  el('path', { d: steps(ends) + ' L' + x(Math.min(now, tmax)) + ',' + y(ends.length), class: 'done-line' }, svg);
}

function hostsUp() {
  const up = {};
  const c = view.cluster;
  if (!c) return up;
  for (const [h, v] of Object.entries(c.hosts_up || {})) up[h] = v;
  for (const p of Object.values(c.pools || {})) if (!(p.host in up)) up[p.host] = true;
  for (const d of Object.values(c.decoders || {})) if (!(d.host in up)) up[d.host] = true;
  return up;
}

function renderHosts() {
  const ul = $('hosts');
  ul.replaceChildren();
  for (const [h, up] of Object.entries(hostsUp()).sort()) {
    const li = document.createElement('li');
    li.className = 'badge ' + (up ? 'up' : 'down');
    li.dataset.host = h;
    li.textContent = h + (up ? ' up' : ' down');
    ul.appendChild(li);
  }
}

// Each pool, and the model its backend says it holds loaded (its identity on hover).
function renderPools() {
  const tb = $('pools').tBodies[0];
  tb.replaceChildren();
  const c = view.cluster;
  if (!c) return;
  for (const [name, p] of Object.entries(c.pools || {})) {
    const tr = tb.insertRow();
    const up = p.alive && hostsUp()[p.host] !== false;
    const state = !up ? 'not answering' : p.drained ? 'drained' : p.busy ? 'busy' : 'idle';
    for (const v of [name, p.host, p.kind, state, p.model || '–'])
      tr.insertCell().textContent = v;
    tr.dataset.pool = name;
    tr.dataset.model = p.model || '';
    if (p.model_identity) tr.title = 'model ' + p.model + ': ' + p.model_identity;
    if (!up) tr.className = 'state-failed';
  }
}

function renderDecoders() {
  const tb = $('decoders').tBodies[0];
  tb.replaceChildren();
  const c = view.cluster;
  if (!c) return;
  for (const [name, d] of Object.entries(c.decoders || {})) {
    view.pendingMax[name] = Math.max(view.pendingMax[name] || 0, d.pending || 0);
    const tr = tb.insertRow();
    // A decoder that does not answer (its host down) grants nothing: no credits shown.
    const up = d.alive && hostsUp()[d.host] !== false;
    for (const v of [name, d.host, up ? d.pending : '–', up ? d.holding : '–', up ? d.credits : '–', view.pendingMax[name]])
      tr.insertCell().textContent = v;
    tr.dataset.decoder = name;
    tr.dataset.alive = up ? 'yes' : 'no';
    if (!up) tr.className = 'state-failed';
  }
}

function renderJobs() {
  const tb = $('jobs').tBodies[0];
  tb.replaceChildren();
  for (const j of [...view.jobs.values()].sort((a, b) => a.index - b.index)) {
    const tr = tb.insertRow();
    tr.dataset.index = j.index;
    tr.dataset.state = j.state;
    if (j.workflow) {  // what the job is made with: shown on hover
      tr.dataset.workflow = j.workflow;
      tr.dataset.model = j.model || '';
      tr.title = 'workflow ' + j.workflow + (j.model ? ' (model ' + j.model + ')' : '');
    }
    const p = j.progress ? j.progress.step + '/' + j.progress.steps : (j.running ? j.running.stage : '');
    const end = j.times && j.times.decode_end_s != null ? fmtS(j.times.decode_end_s) : '';
    const cells = [j.index, shotWords(j), j.seed, j.state, j.pool || '', j.decoder || '', p, end, j.error || ''];
    cells.forEach((v, i) => {
      const td = tr.insertCell();
      td.textContent = v;
      if (i === 1) td.className = 'shot';
      if (i === 3) td.className = 'state-' + j.state;
    });
  }
}

// The review: a card per job (its shot, prompt, size, seed, state), a frame of its finished
// video that plays it when clicked, and the verdict buttons. Cards are kept, not redrawn,
// so a playing video goes on playing.
function renderReview() {
  const box = $('review');
  const r = view.run;
  if (!r) return;
  if (box.dataset.runId !== r.run_id) { box.replaceChildren(); box.dataset.runId = r.run_id; }
  for (const j of [...view.jobs.values()].sort((a, b) => a.index - b.index)) {
    let card = box.querySelector('[data-index="' + j.index + '"]');
    if (!card) {
      card = document.createElement('article');
      card.className = 'card';
      card.dataset.index = j.index;
      for (const k of ['title', 'prompt', 'meta', 'media', 'verdict']) {
        const d = document.createElement('div');
        d.className = k;
        card.appendChild(d);
      }
      box.appendChild(card);
    }
    card.dataset.state = j.state;
    text(card.querySelector('.title'), '#' + j.index + ' ' + (j.name || j.shot || 'job ' + j.index));
    text(card.querySelector('.prompt'), j.prompt_start || '');
    text(card.querySelector('.meta'), j.width + 'x' + j.height + ', ' + j.seconds + ' s · seed ' + j.seed + ' · ' + j.state);
    const media = card.querySelector('.media');
    const made = j.state === 'succeeded' || j.state === 'reused';
    const playable = made && j.output && /\.mp4$/.test(j.output);
    if (playable && !media.querySelector('video, img')) {
      // A frame of the video first (taken where the video lies); a click plays it.
      const img = document.createElement('img');
      img.className = 'thumb';
      img.alt = 'a frame of job ' + j.index + "'s video; click to play";
      img.title = 'play';
      img.src = jobUrl(r.run_id, j.index, 'thumbnail');
      img.onclick = () => play(card, r.run_id, j.index);
      media.replaceChildren(img);
    } else if (!playable && !media.firstChild) {
      const ph = document.createElement('div');
      ph.className = 'placeholder';
      ph.textContent = j.state === 'succeeded' ? 'no preview (not an MP4)' : j.state;
      media.replaceChildren(ph);
    } else if (!playable && media.querySelector('.placeholder')) {
      text(media.querySelector('.placeholder'), j.state === 'succeeded' ? 'no preview (not an MP4)' : j.state);
    }
    renderVerdict(card, j);
  }
}

// A job's video or thumbnail, with the page's token (?token=: a <video> or an <img> sends
// no header).
function jobUrl(runId, index, what) {
  return '/v1/runs/' + encodeURIComponent(runId) + '/jobs/' + index + '/' + what +
    (token ? '?token=' + encodeURIComponent(token) : '');
}

// The card's video in place of its thumbnail, playing: served by this node, range requests
// letting the browser seek. How far it played is kept on the card (data-played, seconds).
function play(card, runId, index) {
  const media = card.querySelector('.media');
  const v = document.createElement('video');
  v.controls = true;
  v.muted = true;
  v.preload = 'auto';
  v.poster = jobUrl(runId, index, 'thumbnail');
  v.src = jobUrl(runId, index, 'video');
  v.ontimeupdate = () => {
    if (!(v.currentTime <= Number(card.dataset.played || 0))) card.dataset.played = v.currentTime.toFixed(2);
  };
  media.replaceChildren(v);
  v.play().catch(() => {});  // refused (no gesture): its controls still play it
}

// Accept / reject per take: a reject may ask for another take of the shot (the next seed),
// which the coordinator adds to the run as jobs added are. The verdict is the
// coordinator's (the job's `review`), shown once it says so.
function renderVerdict(card, j) {
  const box = card.querySelector('.verdict');
  const rv = j.review;
  if (rv) card.dataset.verdict = rv.verdict; else delete card.dataset.verdict;
  const said = rv ? rv.verdict + (rv.take_index != null ? ' · another take: #' + rv.take_index : '') : '';
  const retake = j.retake_of != null ? 'take asked by the reject of #' + j.retake_of : '';
  const key = j.state + '|' + said + '|' + retake;
  if (box.dataset.key === key) return;
  box.dataset.key = key;
  box.replaceChildren();
  if (retake) {
    const p = document.createElement('div');
    p.className = 'retake';
    p.textContent = retake;
    box.appendChild(p);
  }
  if (said) {
    const p = document.createElement('div');
    p.className = 'said said-' + rv.verdict;
    p.textContent = said;
    box.appendChild(p);
  }
  if (j.state !== 'succeeded' && j.state !== 'reused') return;
  const buttons = [['accept', 'Accept', false], ['reject', 'Reject', false],
                   ['retake', 'Reject + another take', true]];
  for (const [action, label, another] of buttons) {
    const b = document.createElement('button');
    b.type = 'button';
    b.dataset.action = action;
    b.textContent = label;
    b.onclick = () => review(card, j.index, action === 'accept' ? 'accept' : 'reject', another);
    box.appendChild(b);
  }
}

async function review(card, index, verdict, anotherTake) {
  const r = view.run;
  const err = card.querySelector('.verdict');
  try {
    const res = await fetch('/v1/runs/' + encodeURIComponent(r.run_id) + '/jobs/' + index + '/review', {
      method: 'POST',
      headers: Object.assign({ 'Content-Type': 'application/json' }, headers),
      body: JSON.stringify({ verdict: verdict, another_take: anotherTake }),
    });
    const body = await res.json();
    if (!res.ok) throw new Error(body.error || res.status);
    const j = view.jobs.get(index);
    if (j) j.review = { verdict: body.verdict, take_index: body.take ? body.take.index : null };
    schedule();
  } catch (e) {
    const p = document.createElement('div');
    p.className = 'error';
    p.textContent = 'review: ' + e.message;
    err.appendChild(p);
  }
}

function renderFailures() {
  const ul = $('failures');
  ul.replaceChildren();
  if (!view.failures.length) {
    const li = document.createElement('li');
    li.className = 'none';
    li.textContent = 'none';
    ul.appendChild(li);
  }
  for (const f of view.failures.slice(-50)) {
    const li = document.createElement('li');
    const j = view.jobs.get(f.index);
    li.textContent = (f.label || (j ? jobLabel(j) : 'job ' + f.index)) + ' · ' + f.stage + (f.lane ? ' on ' + f.lane : '') +
      (f.end_s != null ? ' at ' + fmtS(f.end_s) : '') + ': ' + (f.reason || 'no reason given');
    ul.appendChild(li);
  }
}

const POOL_STAGES = ['conditioning', 'sampling', 'waiting'];
const DECODER_STAGES = ['handoff', 'pending', 'decode'];

function renderGantt() {
  const svg = $('gantt');
  const r = view.run;
  svg.replaceChildren();
  if (!r || !r.lanes) return;
  const lanes = [];
  for (const p of r.lanes.pools || []) lanes.push({ name: p.name, host: p.host, kind: 'pool' });
  for (const d of r.lanes.decoders || []) lanes.push({ name: d.name, host: d.host, kind: 'decoder' });
  const now = nowS();
  const plan = view.plan && view.plan.makespan_s;
  let tmax = Math.max(now, 1);
  if (r.state === 'running' && plan) tmax = Math.max(tmax, plan);
  for (const j of view.jobs.values())
    for (const s of Object.values(j.stages || {})) if (s) tmax = Math.max(tmax, s.end_s);
  const W = 1000, L = 110, LH = 26, T = 18;
  const H = T + lanes.length * LH + 6;
  svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
  const x = t => L + (W - L - 10) * Math.max(0, t) / tmax;
  const row = {};
  lanes.forEach((l, i) => {
    row[l.name] = T + i * LH;
    el('text', { x: 4, y: T + i * LH + 16 }, svg).textContent = l.name;
    el('line', { x1: L, y1: T + (i + 1) * LH, x2: W - 10, y2: T + (i + 1) * LH, stroke: '#eee' }, svg);
  });
  // One unit for the whole axis; the last label ends at the edge instead of running past it.
  for (let k = 0; k <= 5; k++) {
    const t = tmax * k / 5;
    const anchor = k === 0 ? 'start' : k === 5 ? 'end' : 'middle';
    el('text', { x: x(t), y: 12, 'text-anchor': anchor, class: 'axis' }, svg).textContent = fmtS(t);
  }
  for (const o of r.outages || []) {
    lanes.forEach(l => {
      if (l.host !== o.host) return;
      const to = o.to_s == null ? now : o.to_s;
      el('rect', { x: x(o.from_s), y: row[l.name], width: Math.max(1, x(to) - x(o.from_s)), height: LH - 2, class: 'outage' }, svg);
    });
  }
  const bar = (lane, a, b, cls, thin) => {
    if (!(lane in row) || a == null || b == null) return;
    const y0 = row[lane] + (thin === 'top' ? 2 : thin === 'bottom' ? LH - 8 : 6);
    const h = thin ? 5 : LH - 12;
    const e = el('rect', { x: x(a), y: y0, width: Math.max(1, x(b) - x(a)), height: h, class: cls }, svg);
    return e;
  };
  // A bar named by its job: a tooltip with the shot, and the index and name where it fits.
  const named = (e, j, st) => {
    if (!e) return;
    el('title', {}, e).textContent = jobLabel(j) + ' · ' + st;
    const w = Number(e.getAttribute('width'));
    if (w < 18 || (st !== 'sampling' && st !== 'decode')) return;
    let label = String(j.index);
    const name = (j.name || j.shot || '');
    const room = Math.floor(w / 6);
    if (name && room > label.length + 3) label += ' ' + (name.length + label.length + 1 <= room ? name : name.slice(0, room - label.length - 2) + '~');
    el('text', { x: Number(e.getAttribute('x')) + w / 2, y: Number(e.getAttribute('y')) + 10, 'text-anchor': 'middle', class: 'bar-label' }, svg).textContent = label;
  };
  for (const j of view.jobs.values()) {
    const s = j.stages || {};
    for (const st of POOL_STAGES) if (s[st]) named(bar(j.pool, s[st].start_s, s[st].end_s, st, st === 'waiting' ? 'top' : null), j, st);
    for (const st of DECODER_STAGES) if (s[st]) named(bar(j.decoder, s[st].start_s, s[st].end_s, st, st === 'pending' ? 'top' : st === 'handoff' ? 'bottom' : null), j, st);
    for (const f of j.failed_attempts || []) bar(f.lane, f.start_s, f.end_s, 'failed', null);
    if (j.running && r.state === 'running') {
      const cls = j.running.stage === 'decoding' ? 'decode' : j.running.stage;
      const b = bar(j.running.lane, j.running.start_s, now, cls + ' running-bar', j.running.stage === 'waiting' ? 'top' : null);
      if (b) b.dataset.job = j.index;
    }
  }
  if (r.state === 'running') el('line', { x1: x(now), y1: T, x2: x(now), y2: H, class: 'now-line' }, svg);
}

setInterval(() => { if (view.run && view.run.state === 'running') schedule(); }, 1000);
render();
follow();
