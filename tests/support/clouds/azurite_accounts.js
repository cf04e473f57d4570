// Preloaded into Azurite's blob server by tests/support/clouds/azurite.py (node -r THIS main.js ...).
// Azurite reads its account keys from AZURITE_ACCOUNTS and re-reads that variable every 60 s; a running
// process's environment cannot be changed from outside, so this sets the variable from the file named by
// BERTH_AZURITE_ACCOUNTS_FILE and, on SIGHUP, reads the file again and asks Azurite's own account store to
// refresh at once. The key checks stay Azurite's: only the moment of its refresh is ours.
"use strict";
const fs = require("fs");
const path = require("path");
const file = process.env.BERTH_AZURITE_ACCOUNTS_FILE;
const load = () => { process.env.AZURITE_ACCOUNTS = fs.readFileSync(file, "utf8").trim(); };
load();
const storePath = path.join(path.dirname(require.resolve("azurite/package.json")), "dist/src/common/AccountDataStore.js");
const Store = require(storePath).default;
const stores = [];
const init = Store.prototype.init;
Store.prototype.init = function (...args) { stores.push(this); return init.apply(this, args); };
process.on("SIGHUP", () => {
  load();
  for (const store of stores) store.refresh();
  fs.writeFileSync(file + ".applied", process.env.AZURITE_ACCOUNTS);
});
