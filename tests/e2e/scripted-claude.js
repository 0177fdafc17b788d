// A scripted stand-in for Claude Code, for the kind e2e (the example box image has node, not Python).
// The same screen as agentbox_sim/fake_agent.py's claude-code mode: the limit line
// "You've hit your 5-hour limit · resets 5:13pm (UTC)" above the boxed prompt; `continue` submitted
// after the reset makes it work, before it the limit line comes back.
// Usage: node scripted-claude.js <reset epoch seconds, on a whole minute>
const reset = Number(process.argv[2]);
const W = 62;
const lines = [];
let typed = "";
let working = false;

function clock(epoch) {
  const d = new Date(epoch * 1000);
  const h = d.getUTCHours(), m = d.getUTCMinutes();
  const ampm = h < 12 ? "am" : "pm";
  const hh = h % 12 || 12;
  return m === 0 ? `${hh}${ampm}` : `${hh}:${String(m).padStart(2, "0")}${ampm}`;
}
function draw() {
  const rows = process.stdout.rows || 40;
  const footer = [
    ...(working ? [`✶ Composing… (${Math.floor(Date.now() / 1000) % 60}s · ↓ 1.2k tokens · esc to interrupt)`] : []),
    "╭" + "─".repeat(W) + "╮", ("│ > " + typed).padEnd(W + 1).slice(0, W + 1) + "│", "╰" + "─".repeat(W) + "╯",
    "  ? for shortcuts"];
  const body = lines.slice(-Math.max(1, rows - footer.length - 1));
  process.stdout.write("\x1b[2J\x1b[H" + [...body, "", ...footer].join("\r\n"));
}
function limit() {
  lines.push("", `  ⎿  You've hit your 5-hour limit · resets ${clock(reset)} (UTC)`);
  draw();
}
function submit() {
  const line = typed;
  typed = "";
  lines.push("", `> ${line}`);
  if (Date.now() / 1000 >= reset) {
    working = true;
    lines.push("", "⏺ Continuing the task where I left off.");
    draw();
  } else {
    limit();
  }
}
if (process.stdin.isTTY) process.stdin.setRawMode(true);
process.stdin.setEncoding("utf8");
process.stdin.on("data", (data) => {
  for (const ch of data) {
    if (ch === "\r" || ch === "\n") submit();
    else if (ch === "\x7f") { typed = typed.slice(0, -1); draw(); }
    else if (ch === "\x03") process.exit(130);
    else if (ch >= " ") { typed += ch; draw(); }
  }
});
setInterval(() => { if (working) draw(); }, 1000);
lines.push("> fix the build");
limit();
