package api

import "net/http"

func notYet(w http.ResponseWriter, r *http.Request) {
	writeError(w, r, http.StatusNotImplemented, "not_implemented", "not implemented yet")
}

func (s *Server) handleListMessages(w http.ResponseWriter, r *http.Request)  { notYet(w, r) }
func (s *Server) handleGetMessage(w http.ResponseWriter, r *http.Request)    { notYet(w, r) }
func (s *Server) handleDeleteMessage(w http.ResponseWriter, r *http.Request) { notYet(w, r) }
func (s *Server) handleAcknowledge(w http.ResponseWriter, r *http.Request)   { notYet(w, r) }
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request)        { notYet(w, r) }
func (s *Server) handleStartReplay(w http.ResponseWriter, r *http.Request)   { notYet(w, r) }
func (s *Server) handleListReplays(w http.ResponseWriter, r *http.Request)   { notYet(w, r) }
func (s *Server) handleGetReplay(w http.ResponseWriter, r *http.Request)     { notYet(w, r) }
func (s *Server) handleCancelReplay(w http.ResponseWriter, r *http.Request)  { notYet(w, r) }
func (s *Server) handleListGroups(w http.ResponseWriter, r *http.Request)    { notYet(w, r) }
func (s *Server) handleGetGroup(w http.ResponseWriter, r *http.Request)      { notYet(w, r) }
func (s *Server) handleStats(w http.ResponseWriter, r *http.Request)         { notYet(w, r) }
func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request)        { notYet(w, r) }
func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request)         { notYet(w, r) }
func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request)       { notYet(w, r) }
