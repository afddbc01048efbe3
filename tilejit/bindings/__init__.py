"""bindings"""
