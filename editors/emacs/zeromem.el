;;; zeromem.el --- zeromem language server for DeepSpeed configs, with eglot  -*- lexical-binding: t; -*-

;; Package-Requires: ((emacs "28.1") (eglot "1.9"))
;; SPDX-License-Identifier: Apache-2.0

;;; Commentary:

;; Put this file on `load-path' and add to your init file:
;;
;;   (require 'zeromem)
;;   (setq zeromem-settings '(:gpu_memory "80GiB" :parameters "7B"))
;;   (add-hook 'json-ts-mode-hook #'eglot-ensure)   ; or json-mode-hook / js-json-mode-hook
;;   (add-hook 'yaml-ts-mode-hook #'eglot-ensure)   ; Accelerate YAML and recipes (or yaml-mode-hook)
;;
;; Emacs 28 (eglot from ELPA or Debian's elpa-eglot) opens *.json in js-mode: before the require,
;;   (setq zeromem-major-modes '(js-mode))  and hook js-mode-hook instead.
;;
;; Or, without this file, the two forms it amounts to:
;;
;;   (with-eval-after-load 'eglot
;;     (add-to-list 'eglot-server-programs
;;                  '((json-ts-mode json-mode js-json-mode) . ("zeromem" "serve"))))
;;   (setq-default eglot-workspace-configuration
;;                 '(:zeromem (:gpu_memory "80GiB" :parameters "7B" :world_size 8)))
;;
;; The server checks DeepSpeed configs, Accelerate YAML and axolotl / LLaMA-Factory / TRL recipes
;; (recognised by their keys) and says nothing about other JSON or YAML files.  Settings:
;; gpu_memory, parameters, world_size, precision, optimizer, warn_fraction; a config's own
;; "zeromem" block and the project's [tool.zeromem] both rank above them.

;;; Code:

(require 'cl-lib)
(require 'eglot)

(defgroup zeromem nil
  "The zeromem language server for DeepSpeed training configs."
  :group 'tools
  :prefix "zeromem-")

(defcustom zeromem-command '("zeromem" "serve")
  "How to start the server.
With zeromem-lsp in a virtual environment instead of on PATH:
  (\"/path/to/venv/bin/python\" \"-m\" \"zeromem_lsp\" \"serve\")."
  :type '(repeat string))

(defcustom zeromem-settings '()
  "Server settings, a plist such as (:gpu_memory \"80GiB\" :parameters \"7B\" :world_size 8).
Keys: :gpu_memory, :parameters, :world_size, :precision, :optimizer, :warn_fraction."
  :type 'plist)

(defcustom zeromem-major-modes '(json-ts-mode json-mode js-json-mode jsonc-mode yaml-ts-mode yaml-mode)
  "Major modes whose buffers zeromem checks."
  :type '(repeat symbol))

(defun zeromem--contact (&optional _interactive)
  "The eglot contact: `zeromem-command', with `zeromem-settings' as initializationOptions."
  (append zeromem-command
          (when zeromem-settings
            (list :initializationOptions zeromem-settings))))

;; The other sections of `eglot-workspace-configuration' when `zeromem-eglot-setup' took it over.
(defvar zeromem--other-configuration nil)

(defun zeromem--workspace-configuration (&optional _server)
  "Answer workspace/configuration: `zeromem-settings' as section \"zeromem\", plus any others."
  (append (list :zeromem (or zeromem-settings (make-hash-table)))
          (cl-loop for (key value) on zeromem--other-configuration by #'cddr
                   unless (eq key :zeromem) append (list key value))))

;;;###autoload
(defun zeromem-eglot-setup ()
  "Register zeromem with eglot for `zeromem-major-modes'.
A plist already in `eglot-workspace-configuration' is kept for the other servers; a function
there is left alone (then add a :zeromem section to what it returns)."
  (add-to-list 'eglot-server-programs (cons zeromem-major-modes #'zeromem--contact))
  (let ((current (default-value 'eglot-workspace-configuration)))
    (unless (or (functionp current) (eq current #'zeromem--workspace-configuration))
      (setq zeromem--other-configuration current)
      (setq-default eglot-workspace-configuration #'zeromem--workspace-configuration))))

(zeromem-eglot-setup)

(provide 'zeromem)
;;; zeromem.el ends here
