// guard UI: live updates, countdowns and keyboard shortcuts. The pages work
// without this script: every decision is a plain form.
(function () {
  "use strict";

  var live = document.getElementById("live");
  var page = document.body.dataset.page || "";

  function say(text) {
    if (!live) return;
    live.textContent = text;
    live.hidden = !text;
  }

  // fetchHTML gets a fragment and parses it; null when the session ended.
  function fetchHTML(url) {
    return fetch(url, { credentials: "same-origin", cache: "no-store" }).then(function (r) {
      if (r.status === 401) {
        say("Your session ended: run `guard ui url` and open the address it prints.");
        return null;
      }
      if (!r.ok) throw new Error(url + ": " + r.status);
      return r.text().then(function (t) {
        return new DOMParser().parseFromString(t, "text/html");
      });
    });
  }

  // refresher runs fn once at a time; a request that arrives meanwhile
  // runs it again afterwards.
  function refresher(fn) {
    var running = false, again = false;
    function run() {
      if (running) { again = true; return; }
      running = true;
      Promise.resolve().then(fn).catch(function (e) { console.warn("guard:", e); }).then(function () {
        running = false;
        if (again) { again = false; run(); }
      });
    }
    return run;
  }

  function cardsIn(root) {
    return Array.prototype.slice.call(root.querySelectorAll("[data-approval-id]"));
  }

  // updateRules brings a card kept on the page up to date with the
  // reviews made since (approval rules): who approved, what is still
  // needed, and whether this person may still decide.
  function updateRules(el, fresh) {
    if (el.dataset.reviews === fresh.dataset.reviews) return;
    ["rules", "refusal"].forEach(function (role) {
      var old = el.querySelector('[data-role="' + role + '"]');
      var neu = fresh.querySelector('[data-role="' + role + '"]');
      if (old && neu) old.replaceWith(document.importNode(neu, true));
    });
    var actions = el.querySelector(".actions"), freshActions = fresh.querySelector(".actions");
    if (actions && freshActions) actions.hidden = freshActions.hidden;
    el.dataset.reviews = fresh.dataset.reviews;
  }

  // Pending calls: keep the cards already shown (a reason being typed, the
  // focus), drop the ones decided elsewhere, add the new ones in order.
  var refreshPending = refresher(function () {
    var list = document.getElementById("pending-list");
    if (!list) return;
    return fetchHTML("/fragments/pending").then(function (doc) {
      if (!doc) return;
      var fresh = doc.getElementById("pending-list");
      if (!fresh) return;
      var want = cardsIn(fresh);
      var keep = {};
      want.forEach(function (c) { keep[c.dataset.approvalId] = true; });
      var focused = currentCard();
      var next = null;
      cardsIn(list).forEach(function (c) {
        if (!keep[c.dataset.approvalId]) {
          if (c === focused) next = siblingCard(c, 1) || siblingCard(c, -1);
          c.remove();
        }
      });
      var have = {};
      cardsIn(list).forEach(function (c) { have[c.dataset.approvalId] = c; });
      var prev = null;
      want.forEach(function (c) {
        var id = c.dataset.approvalId;
        var el = have[id];
        if (!el) {
          el = document.importNode(c, true);
          if (prev) prev.after(el); else list.prepend(el);
        } else {
          updateRules(el, c);
        }
        prev = el;
      });
      var empty = list.querySelector("[data-empty]");
      if (want.length === 0 && !empty) {
        var e = fresh.querySelector("[data-empty]");
        if (e) list.append(document.importNode(e, true));
      } else if (want.length > 0 && empty) {
        empty.remove();
      }
      list.dataset.count = String(want.length);
      if (next && !currentCard()) next.focus();
      tick();
    });
  });

  // replaceById swaps an element for its fresh copy; rows (data-call-id)
  // that were not there before are marked new.
  function replaceById(id, url) {
    return refresher(function () {
      var el = document.getElementById(id);
      if (!el) return;
      return fetchHTML(url()).then(function (doc) {
        if (!doc) return;
        var fresh = doc.getElementById(id);
        if (!fresh) return;
        var seen = {};
        el.querySelectorAll("[data-call-id]").forEach(function (r) { seen[r.dataset.callId] = true; });
        var node = document.importNode(fresh, true);
        if (Object.keys(seen).length) {
          node.querySelectorAll("[data-call-id]").forEach(function (r) {
            if (!seen[r.dataset.callId]) r.classList.add("new");
          });
        }
        el.replaceWith(node);
      });
    });
  }

  var refreshActivity = replaceById("activity", function () { return "/fragments/activity" + location.search; });
  var refreshChanges = replaceById("changes-list", function () { return "/fragments/changes"; });
  var refreshTools = replaceById("tools-list", function () { return "/fragments/tools"; });
  var refreshConfig = replaceById("config-change", function () { return "/fragments/config"; });
  var refreshNav = replaceById("nav", function () { return "/fragments/nav?page=" + encodeURIComponent(page); });

  function changed(what) {
    if (what === "pending") { refreshPending(); refreshNav(); refreshChanges(); }
    if (what === "activity") refreshActivity();
    if (what === "tools") { refreshChanges(); refreshTools(); refreshNav(); }
    if (what === "config") { refreshConfig(); refreshNav(); }
  }

  // Live updates: the server says what changed; the page fetches it.
  var delay = 500;
  function connect() {
    var ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
    ws.onopen = function () {
      delay = 500;
      document.body.dataset.live = "open";
      if (live && live.dataset.kind === "offline") { say(""); delete live.dataset.kind; }
    };
    ws.onmessage = function (ev) {
      var m;
      try { m = JSON.parse(ev.data); } catch (e) { return; }
      if (m && m.type === "changed") changed(m.what);
    };
    ws.onclose = function () {
      document.body.dataset.live = "closed";
      if (live && !live.textContent) {
        live.dataset.kind = "offline";
        say("Live updates paused; reconnecting…");
      }
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }
  if ("WebSocket" in window) connect();

  // Countdowns.
  function human(ms) {
    if (ms <= 0) return "expired";
    var s = Math.floor(ms / 1000), out = "";
    var d = Math.floor(s / 86400); s -= d * 86400;
    var h = Math.floor(s / 3600); s -= h * 3600;
    var m = Math.floor(s / 60); s -= m * 60;
    if (d) out += d + "d";
    if (h) out += h + "h";
    if (m) out += m + "m";
    if (s || !out) out += s + "s";
    return out + " left";
  }
  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-expires]").forEach(function (t) {
      var at = Date.parse(t.dataset.expires);
      if (!isNaN(at)) t.textContent = human(at - now);
    });
  }
  setInterval(tick, 1000);

  // Keyboard: j/k move between calls, a approves, d goes to the reason of
  // a denial (Enter sends it), Escape leaves a field.
  function currentCard() {
    var a = document.activeElement;
    return a && a.closest ? a.closest("[data-approval-id]") : null;
  }
  function siblingCard(card, step) {
    var all = cardsIn(document);
    var i = all.indexOf(card);
    return all[i + step] || null;
  }
  function move(step) {
    var all = cardsIn(document);
    if (!all.length) return;
    var cur = currentCard();
    var i = cur ? all.indexOf(cur) + step : (step > 0 ? 0 : all.length - 1);
    var el = all[Math.max(0, Math.min(all.length - 1, i))];
    el.focus();
    el.scrollIntoView({ block: "nearest" });
  }
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    var t = e.target;
    var typing = t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable);
    if (typing) {
      if (e.key === "Escape") {
        var c = t.closest("[data-approval-id]");
        if (c) c.focus(); else t.blur();
      }
      return;
    }
    var card = currentCard();
    switch (e.key) {
      case "j": move(1); break;
      case "k": move(-1); break;
      case "a":
        if (card) { var b = card.querySelector('[data-action="approve"]'); if (b) b.click(); }
        break;
      case "d":
        if (card) {
          var r = card.querySelector('[data-role="reason"]');
          if (r) {
            r.focus();
            // The key that moved here types nothing into the reason, even
            // where a keypress follows the cancelled keydown.
            var swallow = function (ev) { if (ev.key === "d") ev.preventDefault(); };
            var done = function () { r.removeEventListener("keypress", swallow); document.removeEventListener("keyup", done); };
            r.addEventListener("keypress", swallow);
            document.addEventListener("keyup", done);
          }
        }
        break;
      default: return;
    }
    e.preventDefault();
  });

  if (page === "pending" && !currentCard()) {
    var first = cardsIn(document)[0];
    if (first && !document.querySelector("[autofocus]")) first.focus({ preventScroll: true });
  }
})();
