// validate.js — checks sampled outputs against their JSON Schemas with ajv.
//   node validate.js NODE_MODULES OUT_DIR SCHEMA...
// Each SCHEMA has OUT_DIR/<basename>.jsonl of {"text","complete"} lines.
// Complete samples must parse and validate; at least half must be complete.
'use strict';
const fs = require('fs');
const path = require('path');
const [nm, outDir, ...schemas] = process.argv.slice(2);
const Ajv2020 = require(path.join(nm, 'ajv/dist/2020')).default;
const addFormats = require(path.join(nm, 'ajv-formats')).default;
let failures = 0;
for (const file of schemas) {
  const name = path.basename(file, '.json');
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  const validate = ajv.compile(JSON.parse(fs.readFileSync(file, 'utf8')));
  const lines = fs.readFileSync(path.join(outDir, name + '.jsonl'), 'utf8').split('\n').filter(Boolean);
  let complete = 0;
  for (const line of lines) {
    const s = JSON.parse(line);
    if (!s.complete) continue;
    complete++;
    let v;
    try { v = JSON.parse(s.text); } catch (e) {
      console.log(`FAIL ${name}: not JSON: ${JSON.stringify(s.text)}`); failures++; continue;
    }
    if (!validate(v)) {
      console.log(`FAIL ${name}: ${JSON.stringify(s.text)}: ${ajv.errorsText(validate.errors)}`); failures++;
    }
  }
  if (lines.length === 0 || complete * 2 < lines.length) {
    console.log(`FAIL ${name}: only ${complete} of ${lines.length} samples complete`); failures++;
  }
  console.log(`${name}: ${complete}/${lines.length} complete samples validated`);
}
process.exit(failures ? 1 : 0);
