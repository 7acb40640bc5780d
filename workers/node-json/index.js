// node-json: flattens a JSON document into {"a.b[0]": leaf, ...}.
// Contract: inputs in /airlock/input.json, scalar outputs in
// /airlock/output/result.json, logs on stdout/stderr.
"use strict";

const fs = require("fs");

const input = JSON.parse(fs.readFileSync("/airlock/input.json", "utf8"));
const sep = input.separator;
const flat = {};

function walk(value, path) {
  if (Array.isArray(value) && value.length > 0) {
    value.forEach((v, i) => walk(v, `${path}[${i}]`));
  } else if (value !== null && typeof value === "object" && Object.keys(value).length > 0) {
    for (const [k, v] of Object.entries(value)) {
      walk(v, path === "" ? k : `${path}${sep}${k}`);
    }
  } else {
    flat[path] = value;
  }
}

walk(input.document, "");
const leaves = Object.keys(flat).length;
fs.writeFileSync("/airlock/output/result.json", JSON.stringify({ flat, leaves }));
console.log(`flattened ${leaves} leaves`);
