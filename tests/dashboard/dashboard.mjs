// The dashboard in headless Chromium (run by tests/dashboard/run.sh, which starts the server
// and fills the topic: 4 ready, 1 in flight, 2 dead letters).
import assert from 'node:assert/strict';
import {execFileSync} from 'node:child_process';
import {createRequire} from 'node:module';
import path from 'node:path';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const URL_BASE = env('TXMQ_DASHBOARD_URL');
const USER = env('TXMQ_DASHBOARD_USER');
const SECRET = env('TXMQ_DASHBOARD_SECRET');
const TOPIC = env('TXMQ_DASHBOARD_TOPIC');
const OUT = env('TXMQ_DASHBOARD_OUT');
const TXMQ = env('TXMQ_BINARY');
const require = createRequire(path.join(env('TXMQ_DASHBOARD_NODE_DIR'), 'node_modules', '/'));
const {chromium} = require('playwright-core');

const started = Date.now();
const step = (text) => console.log(`dashboard.mjs: [${((Date.now() - started) / 1000).toFixed(1)} s] ${text}`);

function stats() {
  return JSON.parse(execFileSync(TXMQ, ['--json', 'stats', TOPIC], {encoding: 'utf8'}));
}

const basic = (user, password) => 'Basic ' + Buffer.from(`${user}:${password}`).toString('base64');

// --- Protection, from outside a browser ------------------------------------------------------
step('protection');
{
  let r = await fetch(`${URL_BASE}/`);
  assert.equal(r.status, 401, 'the page without credentials');
  assert.match(r.headers.get('www-authenticate') || '', /^Basic realm="txmq"/);
  r = await fetch(`${URL_BASE}/ui/api/overview`, {headers: {Authorization: basic(USER, SECRET + 'x')}});
  assert.equal(r.status, 401, 'a wrong secret');
  r = await fetch(`${URL_BASE}/ui/api/overview`, {headers: {Authorization: basic('AKIDNOBODY', SECRET)}});
  assert.equal(r.status, 401, 'an unknown key');
  r = await fetch(`${URL_BASE}/`, {headers: {Authorization: basic(USER, SECRET)}});
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-security-policy') || '', /script-src 'self'/);
  const page = await r.text();
  assert.doesNotMatch(page, /https?:\/\/(?!www\.w3\.org)/, 'the page loads nothing from other sites');
  const auth = {Authorization: basic(USER, SECRET), 'Content-Type': 'application/json'};
  const body = JSON.stringify({topic: TOPIC, ids: ['1']});
  r = await fetch(`${URL_BASE}/ui/api/dead/requeue`, {method: 'POST', headers: auth, body});
  assert.equal(r.status, 403, 'a change without X-Txmq-Dashboard (what a cross-site form sends)');
  r = await fetch(`${URL_BASE}/ui/api/dead/delete`, {
    method: 'POST', body, headers: {...auth, 'X-Txmq-Dashboard': '1', Origin: 'http://evil.example'}});
  assert.equal(r.status, 403, 'a change from another origin');
  r = await fetch(`${URL_BASE}/ui/api/overview`, {method: 'POST', headers: auth});
  assert.equal(r.status, 405);
  // SQS calls still reach the SQS API: a GET / with a query is not the page.
  r = await fetch(`${URL_BASE}/?Action=ListQueues`);
  assert.notEqual(r.status, 401);
  assert.match(await r.text(), /<ErrorResponse|MissingAuthenticationToken|IncompleteSignature/);
}

// --- The overview's search and pages, from outside a browser --------------------------------------
step('search and pages');
{
  const auth = {Authorization: basic(USER, SECRET)};
  const overview = async (q) => {
    const r = await fetch(`${URL_BASE}/ui/api/overview?${new URLSearchParams(q)}`, {headers: auth});
    return {status: r.status, body: await r.json()};
  };
  // TOPIC, TOPIC_p1 and TOPIC_p2 (run.sh), by name; two to a page here.
  let r = await overview({search: TOPIC, limit: 2});
  assert.equal(r.status, 200);
  assert.equal(r.body.total, 3);
  assert.ok(r.body.all_topics >= 3);
  assert.deepEqual(r.body.topics.map((t) => t.name), [TOPIC, `${TOPIC}_p1`]);
  assert.equal(r.body.topics[0].groups[0].ready, 4);
  r = await overview({search: TOPIC, limit: 2, offset: 2});
  assert.deepEqual(r.body.topics.map((t) => t.name), [`${TOPIC}_p2`]);
  // The selected topic comes back wherever it is in the list.
  r = await overview({search: `${TOPIC}_p`, selected: TOPIC});
  assert.equal(r.body.total, 2);
  assert.equal(r.body.selected.name, TOPIC);
  assert.equal(r.body.selected.groups[0].dead, 2);
  r = await overview({search: 'no_topic_has_this_in_its_name'});
  assert.equal(r.body.total, 0);
  assert.deepEqual(r.body.topics, []);
  assert.equal((await overview({offset: '-1'})).status, 400);
  assert.equal((await overview({search: 'x'.repeat(65)})).status, 400);
  assert.equal((await overview({selected: 'x'.repeat(65)})).status, 400);
  assert.equal((await overview({offset: '1'.repeat(10)})).status, 400);
}

const before = stats();
assert.equal(before.ready, 4);
assert.equal(before.in_flight, 1);
assert.equal(before.dead, 2);

const browser = await chromium.launch({executablePath: '/usr/bin/chromium', headless: true});
const problems = [];
function watch(page, name) {
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`${name}: console error: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`${name}: page error: ${e.message}`));
  page.on('requestfailed', (r) => problems.push(`${name}: request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`${name}: ${r.status()} for ${r.url()}`);
  });
}

try {
  const context = await browser.newContext({
    httpCredentials: {username: USER, password: SECRET},
    viewport: {width: 1280, height: 900},
  });
  const page = await context.newPage();
  watch(page, 'desktop');
  step('the page loads');
  await page.goto(`${URL_BASE}/`);
  await page.waitForSelector('body[data-loaded="1"]', {timeout: 20000});
  // Other tests' topics may fill the first page: the search finds this run's.
  await page.locator('#search').fill(TOPIC);
  await page.waitForFunction((t) => (document.getElementById('page-info').textContent || '').includes(`of 3 topics matching \u201c${t}\u201d`), TOPIC, {timeout: 10000});
  const row = page.locator(`#topics tr[data-topic="${TOPIC}"][data-group="default"]`);
  await row.waitFor({timeout: 10000});
  assert.equal(await row.locator('td.ready').textContent(), '4', 'depth shown after the sends');
  assert.equal(await row.locator('td.in-flight').textContent(), '1');
  assert.equal(await row.locator('td.dead').textContent(), '2');

  step('the topic\'s group');
  await row.locator('a.select').click();
  await page.waitForSelector('#detail:not([hidden])');
  await page.waitForFunction(() => document.querySelectorAll('#dead tbody tr[data-id]').length === 2, null, {timeout: 10000});
  await page.waitForFunction(() => document.querySelectorAll('#inflight tbody tr[data-id]').length === 1, null, {timeout: 10000});
  const owner = await page.locator('#inflight tbody tr[data-id] td.owner').textContent();
  assert.match(owner, /:\d+$/, 'the in-flight message\'s owner is host:pid');
  const settings = await page.locator('#settings').textContent();
  assert.match(settings, /max attempts1/);
  // Payloads are text, never markup.
  const previews = await page.locator('#dead pre.payload').allTextContents();
  assert.ok(previews.some((p) => p.includes('<img src=x onerror=window.__xss=1>')), previews.join(' | '));
  assert.equal(await page.locator('#dead img').count(), 0);
  assert.equal(await page.evaluate(() => window.__xss), undefined);

  step('requeue from the page');
  const ids = await page.locator('#dead tbody tr[data-id]').evaluateAll((rows) => rows.map((r) => r.dataset.id));
  await page.locator(`#dead tr[data-id="${ids[0]}"] button.requeue`).click();
  await page.waitForFunction((id) => !document.querySelector(`#dead tr[data-id="${id}"]`), ids[0], {timeout: 10000});
  await page.waitForSelector('#dead-message:not([hidden])');
  assert.match(await page.locator('#dead-message').textContent(), /requeued/);
  let s = stats();
  assert.equal(s.dead, 1, 'requeued: one dead letter left');
  assert.equal(s.ready, 5, 'requeued: back with the ready ones');
  await page.waitForFunction((t) => document.querySelector(`#topics tr[data-topic="${t}"][data-group="default"] td.ready`)?.textContent === '5', TOPIC, {timeout: 10000});

  step('delete from the page (two clicks)');
  const del = page.locator(`#dead tr[data-id="${ids[1]}"] button.delete`);
  await del.click();
  assert.equal(await del.textContent(), 'Really delete?');
  assert.equal(stats().dead, 1, 'one click deletes nothing');
  await del.click();
  await page.waitForFunction((id) => !document.querySelector(`#dead tr[data-id="${id}"]`), ids[1], {timeout: 10000});
  s = stats();
  assert.equal(s.dead, 0, 'deleted');
  assert.equal(s.ready, 5, 'deleted, not requeued');

  step('charts: waiting for a second sample');
  await page.waitForFunction(() => document.querySelectorAll('#depth-chart path.line').length > 0 &&
    !document.querySelector('#depth-chart text.empty'), null, {timeout: 40000});
  assert.ok(await page.locator('#rate-chart svg').count() === 1);
  await page.screenshot({path: path.join(OUT, 'dashboard.png'), fullPage: true});

  step('a phone-sized screen (375 px)');
  const phone = await browser.newContext({
    httpCredentials: {username: USER, password: SECRET},
    viewport: {width: 375, height: 812},
    deviceScaleFactor: 2,
    isMobile: true,
    hasTouch: true,
  });
  const small = await phone.newPage();
  watch(small, 'phone');
  await small.goto(`${URL_BASE}/#topic=${encodeURIComponent(TOPIC)}&group=default`);
  await small.waitForSelector('body[data-loaded="1"]', {timeout: 20000});
  await small.waitForSelector('#detail:not([hidden])');
  const overflow = await small.evaluate(() => ({
    scroll: document.documentElement.scrollWidth,
    client: document.documentElement.clientWidth,
  }));
  assert.ok(overflow.scroll <= overflow.client, `no horizontal overflow at 375 px: ${JSON.stringify(overflow)}`);
  await small.screenshot({path: path.join(OUT, 'dashboard-375.png'), fullPage: true});

  assert.deepEqual(problems, [], 'no console errors, failed requests or error statuses');
  step(`passed; screenshots ${path.join(OUT, 'dashboard.png')} and dashboard-375.png`);
} finally {
  await browser.close();
}
