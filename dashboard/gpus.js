// vidline dashboard, the cards: a tile per GPU from GET /v1/gpus every 2 s (temperature,
// power, memory, utilisation, health, errors, the pools and decoders on it), with a short
// history of temperature and power drawn in the tile. Uses app.js's $, text, el and headers.
'use strict';

const gpuView = { history: new Map(), keep: 90 };  // "host/gpu" -> [{t, temp, power}]

function gpuKey(g) { return g.host + '/' + (g.gpu || '#' + g.index); }
function fig(v, unit, digits) { return v == null ? '–' : v.toFixed(digits || 0) + unit; }

function sparkline(svg, points, field, max, cls) {
  if (points.length < 2 || !(max > 0)) return;
  const w = 120, h = 30;
  let d = '';
  points.forEach((p, i) => {
    if (p[field] == null) return;
    const x = (i / (gpuView.keep - 1)) * w, y = h - Math.min(p[field] / max, 1) * h;
    d += (d ? ' L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(1);
  });
  if (d) el('path', { d, class: cls }, svg);
}

// The card's errors since its node started ('' when none): uncorrectable ECC errors, and
// its Xids by code with the newest named.
function gpuErrors(g) {
  const parts = [];
  if (g.ecc_uncorrected > 0) parts.push(g.ecc_uncorrected + ' uncorrectable ECC');
  if (g.xid_events > 0) {
    parts.push('Xid ' + (g.xids || []).map(x => x.code + ' ×' + x.count).join(', ') +
      (g.xid_last != null ? ' (last ' + g.xid_last + ')' : ''));
  }
  return parts.join(' · ');
}

function renderGpus(gpus) {
  const box = $('gpus');
  box.textContent = '';
  if (!gpus.length) {
    box.textContent = 'no node has reported its cards yet';
    return;
  }
  for (const g of gpus) {
    const key = gpuKey(g);
    const tile = document.createElement('div');
    tile.className = 'gpu ' + (g.health || 'unknown') + (g.drained ? ' drained' : '');
    tile.dataset.gpu = key;
    const title = document.createElement('div');
    title.className = 'title';
    text(title, key + (g.name ? ' · ' + g.name : ''));
    tile.appendChild(title);
    const figures = document.createElement('div');
    figures.className = 'figures';
    const mem = g.memory_used_mib == null ? '–'
      : (g.memory_used_mib / 1024).toFixed(1) + '/' + fig(g.memory_total_mib == null ? null : g.memory_total_mib / 1024, ' GiB', 1);
    text(figures, fig(g.temperature_c, ' °C') + ' · ' + fig(g.power_w, ' W') + ' · ' + mem + ' · ' + fig(g.utilization, '%'));
    tile.appendChild(figures);
    const svg = el('svg', { viewBox: '0 0 120 30', class: 'spark', role: 'img', 'aria-label': 'temperature and power' });
    const hist = gpuView.history.get(key) || [];
    sparkline(svg, hist, 'temp', Math.max(g.slowdown_c || 0, 100), 'temp-line');
    sparkline(svg, hist, 'power', Math.max(...hist.map(p => p.power || 0), 1), 'power-line');
    tile.appendChild(svg);
    const health = document.createElement('div');
    health.className = 'meta';
    text(health, (g.health || 'unknown') + (g.health_reason ? ': ' + g.health_reason : '') +
      ((g.users || []).length ? ' · ' + g.users.join(', ') : '') + (g.drained ? ' (drained)' : ''));
    tile.appendChild(health);
    const errors = gpuErrors(g);
    if (errors) {
      const line = document.createElement('div');
      line.className = 'meta errors';
      text(line, errors);
      tile.appendChild(line);
    }
    box.appendChild(tile);
  }
}

async function followGpus() {
  for (;;) {
    try {
      const res = await fetch('/v1/gpus', { headers, cache: 'no-store' });
      if (res.ok) {
        const gpus = (await res.json()).gpus || [];
        for (const g of gpus) {
          const key = gpuKey(g);
          const h = gpuView.history.get(key) || [];
          h.push({ t: g.unix_s, temp: g.temperature_c, power: g.power_w });
          if (h.length > gpuView.keep) h.shift();
          gpuView.history.set(key, h);
        }
        renderGpus(gpus);
      }
    } catch (e) {
      console.warn('vidline: gpus:', e.message);
    }
    await new Promise(r => setTimeout(r, 2000));
  }
}

followGpus();
