;;; test-zeromem.el --- headless end-to-end test of zeromem.el with eglot  -*- lexical-binding: t; -*-

;;   ZEROMEM_PYTHON=/path/to/python ZEROMEM_TEST_FILE=/tmp/x/ds_config.json ZEROMEM_TEST_OUT=/tmp/x/result.json \
;;     emacs --batch -l editors/emacs/test-zeromem.el
;;
;; Loads editors/emacs/zeromem.el as its Commentary says (settings in `zeromem-settings', eglot-ensure
;; from the major mode's hook), opens the file, lets eglot start the server, waits for zeromem's
;; diagnostics in flymake, asks for hover at the "stage" value, and writes to ZEROMEM_TEST_OUT: the
;; Emacs and eglot versions, the major mode, the server's window/showMessage texts, the diagnostics
;; (flymake's text, 0-based line and character column of their start) and the hover.  Exit status 0 when it
;; got both.  tests/editors/test_emacs.py runs it.

;;; Code:

(require 'json)
(require 'cl-lib)

(defvar zeromem-test--result (list (cons 'errors nil)))

(defun zeromem-test--put (key value)
  (setf (alist-get key zeromem-test--result) value))

(defun zeromem-test--fail (message)
  (setf (alist-get 'errors zeromem-test--result)
        (append (alist-get 'errors zeromem-test--result) (list message))))

(defun zeromem-test--wait (predicate seconds)
  "Run timers and read process output until PREDICATE is non-nil or SECONDS pass."
  (let ((deadline (+ (float-time) seconds)) found)
    (while (and (not (setq found (funcall predicate))) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    found))

(let* ((here (file-name-directory (or load-file-name buffer-file-name)))
       (python (or (getenv "ZEROMEM_PYTHON") (error "ZEROMEM_PYTHON not set")))
       (file (or (getenv "ZEROMEM_TEST_FILE") (error "ZEROMEM_TEST_FILE not set")))
       (out (or (getenv "ZEROMEM_TEST_OUT") (error "ZEROMEM_TEST_OUT not set")))
       (timeout (string-to-number (or (getenv "ZEROMEM_TEST_TIMEOUT") "30")))
       ;; Emacs 28 opens *.json in js-mode (js-json-mode and json-ts-mode are Emacs 29's)
       (mode-hook (if (fboundp 'js-json-mode) 'js-json-mode-hook 'js-mode-hook))
       (messages nil))
  (add-to-list 'load-path here)
  (unless (fboundp 'js-json-mode)
    (setq zeromem-major-modes '(js-mode)))
  (setq zeromem-command (list python "-m" "zeromem_lsp" "serve"))
  (setq zeromem-settings (list :gpu_memory (or (getenv "ZEROMEM_TEST_GPU_MEMORY") "24GiB")))
  (condition-case err
      (progn
        (require 'zeromem)
        (require 'flymake)
        (advice-add 'eglot-handle-notification :before
                    (lambda (_server method &rest params)
                      (when (eq method 'window/showMessage)
                        (push (plist-get params :message) messages))))
        (add-hook mode-hook #'eglot-ensure)
        (zeromem-test--put 'emacs emacs-version)
        (zeromem-test--put 'eglot (file-name-nondirectory ; where it was loaded from: ".../eglot-1.9/"
                                   (directory-file-name (file-name-directory (locate-library "eglot")))))
        (find-file file)
        (zeromem-test--put 'major_mode (symbol-name major-mode))
        (run-hooks 'post-command-hook) ; eglot-ensure connects after the command that opened the file
        (unless (zeromem-test--wait #'eglot-current-server timeout)
          (error "eglot did not connect"))
        (let ((diagnostics
               (zeromem-test--wait
                (lambda ()
                  (cl-loop for d in (flymake-diagnostics)
                           when (string-prefix-p "zeromem" (flymake-diagnostic-text d))
                           collect (save-excursion
                                     (goto-char (flymake-diagnostic-beg d))
                                     (list (cons 'text (flymake-diagnostic-text d))
                                           (cons 'type (symbol-name (flymake-diagnostic-type d)))
                                           (cons 'line (1- (line-number-at-pos)))
                                           (cons 'column (- (point) (line-beginning-position)))))))
                timeout)))
          (unless diagnostics
            (zeromem-test--fail (format "no zeromem diagnostics within %s s" timeout)))
          (zeromem-test--put 'diagnostics (vconcat diagnostics)))
        (goto-char (point-min))
        (if (not (re-search-forward "\"stage\"[ \t]*:[ \t]*" nil t))
            (zeromem-test--fail "no \"stage\" in the file")
          (let ((hover (jsonrpc-request (eglot-current-server) :textDocument/hover
                                        (eglot--TextDocumentPositionParams))))
            (zeromem-test--put 'hover (plist-get (plist-get hover :contents) :value))))
        (zeromem-test--put 'messages (vconcat (reverse messages)))
        (eglot-shutdown (eglot-current-server)))
    (error (zeromem-test--fail (error-message-string err))))
  (with-temp-file out
    (insert (json-encode zeromem-test--result)))
  (kill-emacs (if (alist-get 'errors zeromem-test--result) 1 0)))

;;; test-zeromem.el ends here
