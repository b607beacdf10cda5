// Passkeys (ui.passkey: required). Every form that decides asks the
// person's authenticator first: the server gives a challenge bound to this
// form (its path and fields), the passkey signs it with user
// verification, and the assertion goes with the form. The enrolment page
// creates a passkey the same way.
(function () {
  "use strict";

  // The forms that decide; the server holds the same list.
  var decides = /^\/(approvals\/[^/]+\/(approve|deny|approve-always)|tools\/changes\/decide|config\/decide)$/;

  function post(path, data) {
    return fetch(path, { method: "POST", body: new URLSearchParams(data), credentials: "same-origin" }).then(function (r) {
      if (!r.ok) return r.text().then(function (t) { throw new Error(t.trim() || r.statusText); });
      return r.json();
    });
  }

  function problem(near, err) {
    var p = document.getElementById("passkey-problem");
    if (!p) {
      p = document.createElement("p");
      p.id = "passkey-problem";
      p.className = "problem";
      p.setAttribute("role", "alert");
      near.appendChild(p);
    }
    p.textContent = "Passkey: " + (err && err.message ? err.message : String(err));
    p.hidden = false;
  }

  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (!document.body.hasAttribute("data-passkey")) return;
    var path = new URL(form.action, location.href).pathname;
    if (!decides.test(path)) return;
    e.preventDefault();
    if (!window.PublicKeyCredential) {
      problem(form, new Error("this browser has no passkeys"));
      return;
    }
    var data = new FormData(form);
    data.delete("assertion");
    data.set("path", path);
    post("/passkey/challenge", data).then(function (opts) {
      return navigator.credentials.get({ publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(opts.publicKey) });
    }).then(function (cred) {
      var input = form.querySelector('input[name="assertion"]');
      if (!input) {
        input = document.createElement("input");
        input.type = "hidden";
        input.name = "assertion";
        form.appendChild(input);
      }
      input.value = JSON.stringify(cred.toJSON());
      form.submit(); // no submit event: this handler does not run again
    }).catch(function (err) { problem(form, err); });
  });

  var enrol = document.getElementById("passkey-enroll");
  if (enrol) {
    enrol.addEventListener("click", function () {
      var data = { code: enrol.dataset.code || "", csrf: enrol.dataset.csrf || "" };
      post("/passkey/enroll/begin", data).then(function (opts) {
        return navigator.credentials.create({ publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(opts.publicKey) });
      }).then(function (cred) {
        data.credential = JSON.stringify(cred.toJSON());
        return post("/passkey/enroll/finish", data);
      }).then(function (res) {
        location.assign(res.next);
      }).catch(function (err) { problem(enrol.parentNode, err); });
    });
  }
})();
