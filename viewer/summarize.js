#!/usr/bin/env node
// Prints the JSON summary (viewer/src/reader.js `summarize`) of each .jaxpr
// file named on the command line, one JSON document per line; a file the
// reader refuses prints {"error": message}. Used by tests/viewer/test_viewer.py.
'use strict';
const fs = require('fs');
const reader = require('./src/reader.js');
for (const path of process.argv.slice(2)) {
  let out;
  try {
    out = reader.summarize(new reader.Program(new Uint8Array(fs.readFileSync(path))));
  } catch (e) {
    if (!(e instanceof reader.FormatError)) throw e;
    out = {error: e.message};
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}
