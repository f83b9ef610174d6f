/* Quantities for people: the twin of portal/units.py (the `quantity` template filter),
   so a number drawn in the browser reads as the same number rendered on the server.
   cpu in millicores -> "250m" below one core, cores above ("1.5", "32.2"); memory and
   storage in bytes -> "512Mi", "9.16Gi"; anything else a count. Three significant
   figures, rounded half up in integers (BigInt), as the Python side does.
   tests/portal/test_units.py runs both over one table of cases. */
(function (root) {
  "use strict";

  var BINARY = [["Ei", 60], ["Pi", 50], ["Ti", 40], ["Gi", 30], ["Mi", 20], ["Ki", 10]];

  function bytesLike(resource) {
    return resource.indexOf("memory") !== -1 || resource.indexOf("storage") !== -1;
  }

  function rounded(amount, unit) {
    var whole = amount / unit;
    var places = whole >= 100n ? 0 : whole >= 10n ? 1 : 2;
    var scale = 10n ** BigInt(places);
    var scaled = (amount * scale * 2n + unit) / (unit * 2n);
    var w = scaled / scale, fraction = scaled % scale;
    if (fraction === 0n) return w.toString();
    return w.toString() + "." + fraction.toString().padStart(places, "0").replace(/0+$/, "");
  }

  function human(resource, value) {
    if (value === null || value === undefined || value === "") return "\u2014";
    if (typeof value === "number" && !Number.isFinite(value)) return String(value);
    var amount;
    try { amount = BigInt(typeof value === "number" ? Math.round(value) : value); }
    catch (e) { return String(value); }  // already a quantity ("64Gi"): shown as it is
    if (amount < 0n) return "-" + human(resource, -amount);
    if (resource === "cpu") {
      if (amount === 0n) return "0";
      return amount < 1000n ? amount.toString() + "m" : rounded(amount, 1000n);
    }
    if (bytesLike(resource)) {
      for (var i = 0; i < BINARY.length; i++) {
        var factor = 1n << BigInt(BINARY[i][1]);
        if (amount >= factor) {
          var text = rounded(amount, factor);
          if (text === "1024" && i > 0) return "1" + BINARY[i - 1][0];
          return text + BINARY[i][0];
        }
      }
    }
    return amount.toString();
  }

  function describe(values) {
    var names = Object.keys(values || {}).sort();
    if (!names.length) return "nothing";
    return names.map(function (n) { return n + " " + human(n, values[n]); }).join(", ");
  }

  var api = { quantity: human, describe: describe };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  else { root.KQ = root.KQ || {}; root.KQ.quantity = human; root.KQ.describeResources = describe; }
})(typeof window !== "undefined" ? window : this);
