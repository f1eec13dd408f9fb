// The capture page: camera -> challenge -> document -> decision.
// <body data-kyc-state> holds the step; the server (kyc_tools.web.app) holds no state of a
// person between requests: the liveness token stays in this page's memory only.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const form = () => $("kyc-document-form");
  const DARK = 45; // mean luma (0-255) under which the picture is too dark to use

  let config = null;
  let stream = null;
  let attempts = 0;
  let token = "";
  let application = "";  // the reference the session's token is bound to
  let selfie = null; // a still of the camera at the end of the challenge (JPEG Blob)

  function setState(name) {
    document.body.dataset.kycState = name;
  }

  function say(text, kind) {
    const box = $("kyc-message");
    box.textContent = text || "";
    box.dataset.kind = kind || "";
  }

  function prompt(text) {
    $("kyc-prompt").textContent = text || "";
  }

  function errorText(code) {
    return (config && config.errors && config.errors[code]) || "Something went wrong.";
  }

  async function loadConfig() {
    const response = await fetch("/api/config", { cache: "no-store" });
    config = await response.json();
  }

  function stopCamera() {
    if (stream) {
      stream.getTracks().forEach((track) => track.stop());
      stream = null;
    }
    $("kyc-video").srcObject = null;
  }

  async function startCamera() {
    say("");
    $("kyc-start").disabled = true;
    try {
      stream = await navigator.mediaDevices.getUserMedia({
        video: { facingMode: "user", width: { ideal: 640 }, height: { ideal: 480 } },
        audio: false,
      });
    } catch (err) {
      $("kyc-start").disabled = false;
      const refused = err && (err.name === "NotAllowedError" || err.name === "SecurityError");
      say(refused
        ? "The camera was refused. Allow it in your browser's settings and start again, " +
          "or continue without it: a person will then look at your documents."
        : "No camera could be opened. You can continue without it: a person will then " +
          "look at your documents.", "error");
      $("kyc-skip").hidden = false;
      return;
    }
    const video = $("kyc-video");
    video.srcObject = stream;
    await video.play().catch(() => {});
    runChallenge();
  }

  // A frame of the camera, downscaled to maxSide, as JPEG; and how bright it is.
  function grab(maxSide, quality) {
    const video = $("kyc-video");
    const width = video.videoWidth;
    const height = video.videoHeight;
    if (!width || !height) return Promise.resolve({ blob: null, luma: 255 });
    const scale = Math.min(1, maxSide / Math.max(width, height));
    const canvas = document.createElement("canvas");
    canvas.width = Math.round(width * scale);
    canvas.height = Math.round(height * scale);
    const context = canvas.getContext("2d", { willReadFrequently: true });
    context.drawImage(video, 0, 0, canvas.width, canvas.height);
    const pixels = context.getImageData(0, 0, canvas.width, canvas.height).data;
    let sum = 0;
    let count = 0;
    for (let i = 0; i < pixels.length; i += 4 * 16) {
      sum += 0.299 * pixels[i] + 0.587 * pixels[i + 1] + 0.114 * pixels[i + 2];
      count += 1;
    }
    return new Promise((resolve) => {
      canvas.toBlob((blob) => resolve({ blob, luma: sum / Math.max(count, 1) }),
        "image/jpeg", quality);
    });
  }

  function runChallenge() {
    attempts += 1;
    $("kyc-retry").hidden = true;
    $("kyc-progress").value = 0;
    setState("challenge");
    say("Connecting…");
    prompt("");
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + location.host + "/ws/liveness");
    let challenge = null;
    let timer = null;
    let started = 0;
    let ending = false;
    let finished = false;
    let endSentAt = 0;

    const stopFrames = () => {
      if (timer) clearInterval(timer);
      timer = null;
    };

    async function sendFrame() {
      if (ws.readyState !== WebSocket.OPEN || ending) return;
      if (ws.bufferedAmount > 256 * 1024) return; // a slow network: skip this frame
      const { blob, luma } = await grab(config.frame_max_side, 0.8);
      if (luma < DARK) say("It is too dark: face a light or a window.", "warn");
      if (blob && ws.readyState === WebSocket.OPEN && !ending) {
        ws.send(await blob.arrayBuffer());
      }
      const limit = Math.min(challenge.max_duration_s, 30) * 1000;
      if (!ending && performance.now() - started > limit) end(); // time is up: the verdict says why
    }

    async function end() {
      if (ending) return;
      ending = true;
      stopFrames();
      selfie = (await grab(640, 0.92)).blob;
      say("Checking…");
      endSentAt = performance.now();
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "end" }));
    }

    function fail(text) {
      stopFrames();
      say(text, "error");
      if (attempts < config.liveness_attempts) {
        $("kyc-retry").hidden = false;
      } else {
        goToDocument("The camera check could not be done. We go on without it: a person " +
          "will look at your documents.");
      }
    }

    ws.onmessage = async (event) => {
      const message = JSON.parse(event.data);
      if (message.type === "challenge") {
        challenge = message;
        started = performance.now();
        $("kyc-progress").max = message.length;
        say("Face the camera, then do what it asks, one move at a time.");
        prompt("Look at the camera");
        timer = setInterval(sendFrame, 1000 / config.capture_fps);
      } else if (message.type === "progress") {
        if (ending) return;
        prompt(message.advice);
        $("kyc-progress").value = message.progress.moves_done || 0;
        const long = performance.now() - started > (challenge.min_duration_s + 0.5) * 1000;
        if (message.ready_to_end && long) end();
      } else if (message.type === "frame_error") {
        say(message.message, "warn");
      } else if (message.type === "result") {
        finished = true;
        document.body.dataset.tokenMs = String(Math.round(performance.now() - endSentAt));
        token = message.token || "";
        application = message.application || "";
        prompt("");
        if (message.live) {
          goToDocument("Camera check passed.");
          return;
        }
        const why = message.reasons.map((reason) => reason.text).join(" ");
        const left = config.liveness_attempts - attempts;
        if (left > 0) {
          say("The camera check did not pass. " + why + " Try again.", "error");
          $("kyc-retry").hidden = false;
        } else {
          goToDocument("The camera check did not pass. " + why + " We go on: a person may " +
            "look at your documents.");
        }
      } else if (message.type === "error") {
        finished = true;
        fail(message.message || errorText(message.error));
      }
    };

    ws.onclose = () => {
      stopFrames();
      if (!finished) fail(errorText("unavailable"));
    };
  }

  function goToDocument(text) {
    stopCamera();
    if (!selfie) $("kyc-selfie-label").hidden = false;
    setState("document");
    say(text || "");
  }

  // A photo larger than the server takes is made smaller here, as a JPEG.
  async function fitted(file) {
    if (file.size <= config.max_image_bytes) return file;
    const bitmap = await createImageBitmap(file);
    const scale = Math.min(1, 2400 / Math.max(bitmap.width, bitmap.height));
    const canvas = document.createElement("canvas");
    canvas.width = Math.round(bitmap.width * scale);
    canvas.height = Math.round(bitmap.height * scale);
    canvas.getContext("2d").drawImage(bitmap, 0, 0, canvas.width, canvas.height);
    return new Promise((resolve) => canvas.toBlob(resolve, "image/jpeg", 0.9));
  }

  async function submitDocument(event) {
    event.preventDefault();
    const documentFile = form().document.files[0];
    if (!documentFile) {
      say("Choose or take a photo of your document.", "error");
      return;
    }
    let face = selfie;
    if (!face) {
      face = form().selfie.files[0];
      if (!face) {
        say("Add a photo of your face.", "error");
        return;
      }
    }
    $("kyc-submit").disabled = true;
    say("Checking your documents…");
    const started = performance.now();
    let response;
    let body;
    try {
      // a form: the photos go as they are (no base64), the token as the server gave it
      const payload = new FormData();
      payload.append("document", await fitted(documentFile), "document.jpg");
      payload.append("selfie", await fitted(face), "selfie.jpg");
      payload.append("liveness_token", token);
      payload.append("application", application);
      response = await fetch("/api/verify", { method: "POST", body: payload });
      body = await response.json();
    } catch (err) {
      $("kyc-submit").disabled = false;
      say(errorText("unavailable"), "error");
      return;
    }
    $("kyc-submit").disabled = false;
    if (!response.ok) {
      say(body.message || errorText("server"), "error");
      return;
    }
    document.body.dataset.decisionMs = String(Math.round(performance.now() - started));
    const decision = $("kyc-decision");
    decision.textContent = body.decision;
    decision.dataset.decision = body.decision;
    $("kyc-decision-text").textContent = body.text;
    const list = $("kyc-reasons");
    list.replaceChildren(...body.reasons.map((reason) => {
      const item = document.createElement("li");
      item.textContent = reason.text;
      item.dataset.code = reason.code;
      return item;
    }));
    token = "";
    application = "";
    selfie = null;
    say("");
    setState("decision");
  }

  function restart() {
    attempts = 0;
    token = "";
    application = "";
    selfie = null;
    form().reset();
    $("kyc-selfie-label").hidden = true;
    $("kyc-skip").hidden = true;
    $("kyc-start").disabled = false;
    say("");
    setState("camera");
  }

  document.addEventListener("DOMContentLoaded", async () => {
    try {
      await loadConfig();
    } catch (err) {
      say("The verification service is not available. Please try again later.", "error");
      return;
    }
    $("kyc-start").addEventListener("click", startCamera);
    $("kyc-skip").addEventListener("click", () => goToDocument(
      "Without the camera check a person will look at your documents."));
    $("kyc-retry").addEventListener("click", runChallenge);
    $("kyc-again").addEventListener("click", restart);
    form().addEventListener("submit", submitDocument);
    document.body.dataset.ready = "true";
  });
})();
