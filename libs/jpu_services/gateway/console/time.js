import { localError } from "./core.js";

// sbatch --time, the rules of the CLI's parser (jpu.policy.time_limits.parse_time_limit):
// "M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S" → seconds; "UNLIMITED"/"infinite" → null.
// One rule, two parsers (SPEC U1): both run the cases of tests/fixtures/time_limits.json.
export const TIME_RE = /^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$/;
export function parseTimeLimit(text) {
  const s = String(text).trim();
  if (["unlimited", "infinite"].includes(s.toLowerCase())) return null;
  const m = TIME_RE.exec(s);
  if (!m) throw localError("submit.time_bad", { value: text });
  const [days, a, b, c] = m.slice(1).map((g) => (g === undefined ? null : parseInt(g, 10)));
  let seconds;
  if (days === null) {
    const parts = [a, b, c].filter((x) => x !== null);
    if (parts.length === 1) seconds = parts[0] * 60;  // minutes
    else if (parts.length === 2) seconds = parts[0] * 60 + parts[1];  // minutes:seconds
    else seconds = parts[0] * 3600 + parts[1] * 60 + parts[2];
  } else {
    seconds = days * 86400 + (a || 0) * 3600 + (b || 0) * 60 + (c || 0);
  }
  if (seconds <= 0) throw localError("submit.time_zero", { value: text });
  return seconds;
}
